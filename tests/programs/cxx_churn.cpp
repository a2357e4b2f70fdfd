/* tests/programs/cxx_churn.cpp -- a C++ program that churns new/delete through std::map,
 * std::vector, std::string, std::unordered_map and std::shared_ptr, and prints checksums
 * that do not depend on the allocator. run.sh runs it plainly, under LD_PRELOAD, and as a
 * build linked with libkite.so, and compares the outputs. Also multi-threaded: two worker
 * threads build their own maps and hand strings to each other through a locked queue. */
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull; }

static uint64_t churn(unsigned seed, int n) {
  uint64_t x = seed, h = 1469598103934665603ull;
  std::map<std::string, std::vector<int>> m;
  std::unordered_map<int, std::shared_ptr<std::string>> u;
  for (int i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::string key = "key" + std::to_string(x >> 50);
    auto &v = m[key];
    v.resize((x >> 20) % 40, (int)i);
    u[(int)((x >> 33) % 4096)] = std::make_shared<std::string>((size_t)((x >> 40) % 600), (char)('a' + i % 26));
    if (i % 5 == 0) m.erase(m.begin());
    if (i % 1000 == 999) {
      std::vector<std::string> tmp(200, std::string(1000, 'q'));
      for (auto &s : tmp) h = mix(h, s.size());
    }
  }
  for (auto &kv : m) {
    h = mix(h, kv.first.size());
    for (int e : kv.second) h = mix(h, (uint64_t)e);
  }
  for (int k = 0; k < 4096; k++) {
    auto it = u.find(k);
    if (it != u.end()) h = mix(h, it->second->size() + (uint64_t)k);
  }
  return h;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  std::printf("single %016llx\n", (unsigned long long)churn(1, n));
  std::mutex mu;
  std::deque<std::string *> q;
  uint64_t hs[2] = {0, 0};
  std::thread t[2];
  for (int k = 0; k < 2; k++) {
    t[k] = std::thread([&, k] {
      uint64_t h = churn(10 + (unsigned)k, n / 4);
      for (int i = 0; i < 20000; i++) {
        auto *s = new std::string((size_t)(i % 300), (char)('A' + k));
        std::string *other = nullptr;
        {
          std::lock_guard<std::mutex> g(mu);
          q.push_back(s);
          if (q.size() > 100) { other = q.front(); q.pop_front(); }
        }
        if (other) { h += other->size(); delete other; } /* freed by either thread */
      }
      hs[k] = h;
    });
  }
  for (auto &th : t) th.join();
  uint64_t rest = 0;
  for (auto *s : q) { rest += s->size(); delete s; }
  /* the split of the hand-offs between the threads varies; their sum does not */
  std::printf("threads %016llx\n", (unsigned long long)(hs[0] + hs[1] + rest));
  return 0;
}
