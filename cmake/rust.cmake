# cmake/rust.cmake -- the Rust crates in bindings/rust (kite-sys, kite): `cargo test` as
# one CTest test, rust_cargo_test (label rust), and again with the feature `secure`
# (rust_cargo_test_secure), and from their packages (rust_package), in the normal build only.
# The crates build the core from src/ themselves (cc crate); cargo's output goes to
# build/cargo/. The first run fetches the crates named in bindings/rust/Cargo.lock from
# crates.io; later runs need no network. Without cargo (looked up on PATH and in
# ~/.cargo/bin) the test reports itself skipped.
if(NOT KITE_SANITIZE STREQUAL "")
  return()
endif()
find_program(KITE_CARGO cargo HINTS $ENV{HOME}/.cargo/bin)
if(KITE_CARGO)
  add_test(NAME rust_cargo_test
           COMMAND ${CMAKE_COMMAND} -E env CARGO_TARGET_DIR=${CMAKE_BINARY_DIR}/cargo
                   ${KITE_CARGO} test --locked --manifest-path ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml)
  set_tests_properties(rust_cargo_test PROPERTIES LABELS rust TIMEOUT 600)
  # the feature `secure`: the crates over kite's secure build (kite/tests/secure.rs)
  add_test(NAME rust_cargo_test_secure
           COMMAND ${CMAKE_COMMAND} -E env CARGO_TARGET_DIR=${CMAKE_BINARY_DIR}/cargo-secure
                   ${KITE_CARGO} test --locked --features kite/secure
                   --manifest-path ${PROJECT_SOURCE_DIR}/bindings/rust/Cargo.toml)
  set_tests_properties(rust_cargo_test_secure PROPERTIES LABELS rust TIMEOUT 600)
  # the crates as a registry serves them: bindings/rust/package.sh's .crate files, unpacked
  # outside the checkout, build (kite-sys from the C sources it carries) and pass their tests,
  # default and `secure` (two more builds of the crates: tests/install/test_rust_package.sh)
  add_test(NAME rust_package
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/install/test_rust_package.sh
                   ${PROJECT_SOURCE_DIR} ${KITE_CARGO})
  set_tests_properties(rust_package PROPERTIES LABELS rust TIMEOUT 900)
else()
  message(STATUS "kite: cargo not found: rust_cargo_test (the Rust bindings) will be skipped")
  add_test(NAME rust_cargo_test
           COMMAND sh -c "echo 'rust_cargo_test: cargo not found (PATH, ~/.cargo/bin): skipped'; exit 77")
  set_tests_properties(rust_cargo_test PROPERTIES LABELS rust SKIP_RETURN_CODE 77)
endif()
