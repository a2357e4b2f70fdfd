// tests/install/app.cpp -- a C++ program built against an installed kite: containers and
// operator new, checked, then consumer.h's proof that kite served them.
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "consumer.h"

int main(int argc, char **argv) {
  std::map<int, std::string> m;
  for (int i = 0; i < 20000; i++) m[i] = std::string(static_cast<size_t>(20 + i % 100), 'a' + i % 26);
  std::vector<std::unique_ptr<std::vector<int>>> vs;
  for (int i = 0; i < 1000; i++) vs.emplace_back(new std::vector<int>(static_cast<size_t>(i), i));
  long long total = 0;
  for (auto &kv : m) total += static_cast<long long>(kv.second.size());
  for (auto &v : vs) for (int x : *v) total += x;
  // sizes: 200 rounds of 20..119 (sum 6950 each); vectors: sum of i*i for i < 1000
  CONSUMER_CHECK(total == 200LL * 6950 + 999LL * 1000 * 1999 / 6);
  int *one = new int(7);
  CONSUMER_CHECK(kite_owns(one));  // operator new is kite's too
  delete one;
  consumer_check_kite(argc, argv, "app_cxx");
  return consumer_fails ? 1 : 0;
}
