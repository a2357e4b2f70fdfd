//! Keeps the hand-written bindings in step with `include/kite.h`: every `kite_*` function
//! the header declares must have a binding (and every binding a declaration), the fields of
//! `kite_stats_t` must match in name and order, and so must the option constants.

use std::fs;
use std::path::PathBuf;

fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn header() -> String {
    // the root build.rs compiled the library from (KITE_SOURCE_DIR, the packaged kite-c/ or
    // the checkout): the header checked is the one the library was built against
    strip_comments(&read(PathBuf::from(env!("KITE_SYS_C_ROOT")).join("include/kite.h")))
}

fn bindings() -> String {
    read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
}

/// C source without its /* */ and // comments (a comment becomes one space).
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            let end = r.find("*/").expect("unterminated comment in kite.h");
            rest = &r[end + 2..];
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |end| &r[end..]);
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Identifiers starting with `prefix` that are followed (after blanks) by `(`.
fn called_names(src: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut i = 0;
    while let Some(pos) = src[i..].find(prefix) {
        let start = i + pos;
        let before_ok = src[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !is_ident(c));
        let len = src[start..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(src.len() - start);
        let name = &src[start..start + len];
        let after = src[start + len..].trim_start();
        if before_ok && after.starts_with('(') && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
        i = start + len.max(1);
    }
    names
}

/// The text between the braces that follow `opener` (e.g. "struct kite_stats_s").
fn braced_body<'a>(src: &'a str, opener: &str) -> &'a str {
    let at = src
        .find(opener)
        .unwrap_or_else(|| panic!("`{opener}` not found"));
    let open = at + src[at..].find('{').expect("no opening brace");
    let close = open + src[open..].find('}').expect("no closing brace");
    &src[open + 1..close]
}

#[test]
fn every_header_function_has_a_binding() {
    let h = header();
    let declared = called_names(&h, "kite_");
    assert!(
        declared.len() >= 20,
        "too few kite_ functions found in kite.h: {declared:?}"
    );
    let rs = bindings();
    let missing: Vec<_> = declared
        .iter()
        .filter(|name| !rs.contains(&format!("pub fn {name}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "kite.h declares functions with no binding in kite-sys/src/lib.rs: {missing:?}"
    );
}

#[test]
fn every_binding_is_declared_in_the_header() {
    let h = header();
    let declared = called_names(&h, "kite_");
    let rs = bindings();
    let bound: Vec<String> = rs
        .split("pub fn ")
        .skip(1)
        .map(|s| s[..s.find('(').unwrap()].to_string())
        .collect();
    let stale: Vec<_> = bound
        .iter()
        .filter(|name| !declared.contains(name))
        .collect();
    assert!(
        stale.is_empty(),
        "bindings with no declaration in kite.h: {stale:?}"
    );
}

#[test]
fn stats_fields_match() {
    let h = header();
    let c_fields: Vec<String> = braced_body(&h, "struct kite_stats_s")
        .split(';')
        .filter(|d| !d.trim().is_empty())
        .map(|d| {
            let d = d.trim();
            assert!(
                d.starts_with("unsigned long long "),
                "kite_stats_t field of another type: {d}"
            );
            d.rsplit(|c: char| !is_ident(c)).next().unwrap().to_string()
        })
        .collect();
    let rs = bindings();
    let rs_fields: Vec<String> = braced_body(&rs, "pub struct kite_stats_t")
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pub "))
        .map(|l| {
            assert!(
                l.ends_with(": u64,"),
                "kite_stats_t field that is not u64: {l}"
            );
            l["pub ".len()..l.find(':').unwrap()].to_string()
        })
        .collect();
    assert_eq!(c_fields, rs_fields);
}

#[test]
fn option_constants_match() {
    let h = header();
    let c_names: Vec<String> = braced_body(&h, "enum kite_option_e")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            assert!(
                !e.contains('='),
                "kite.h gives an option an explicit value ({e}): teach this test"
            );
            e.to_string()
        })
        .collect();
    let rs = bindings();
    for (value, name) in c_names.iter().enumerate() {
        let decl = format!("pub const {name}: kite_option_t = {value};");
        assert!(rs.contains(&decl), "kite-sys/src/lib.rs lacks `{decl}`");
    }
    let rs_count = rs.matches("pub const KITE_OPTION_").count();
    assert_eq!(rs_count, c_names.len(), "options in kite.h: {c_names:?}");
}

#[test]
fn the_parser_finds_what_it_should() {
    // The checks above are only as good as the parsing: make sure it sees declarations
    // across lines and skips names inside comments or without a call.
    let src = strip_comments(
        "/* kite_in_comment(x) */ void *kite_a(size_t n);\nkite_heap_t *\nkite_b (void); // kite_c(\nkite_t x;",
    );
    assert_eq!(called_names(&src, "kite_"), ["kite_a", "kite_b"]);
}

/// The C sources the library was built from (build.rs): KITE_SOURCE_DIR when set; else, in a
/// kite checkout, the checkout itself, never the staged `kite-c/` that package.sh may be
/// writing or removing beside a checkout build; else (an unpacked package) its `kite-c/`.
#[test]
fn sources_come_from_the_checkout_else_the_package() {
    let root = fs::canonicalize(env!("KITE_SYS_C_ROOT")).expect("KITE_SYS_C_ROOT exists");
    if let Some(dir) = option_env!("KITE_SOURCE_DIR") {
        assert_eq!(root, fs::canonicalize(dir).unwrap(), "KITE_SOURCE_DIR is set");
        return;
    }
    let manifest = fs::canonicalize(env!("CARGO_MANIFEST_DIR")).unwrap();
    let checkout = manifest.join("../../..");
    if fs::canonicalize(checkout.join("bindings/rust/kite-sys")).ok().as_ref() == Some(&manifest) {
        assert_eq!(root, fs::canonicalize(&checkout).unwrap(), "a checkout builds from itself");
    } else {
        assert_eq!(root, manifest.join("kite-c"), "a package builds from the sources it carries");
    }
}
