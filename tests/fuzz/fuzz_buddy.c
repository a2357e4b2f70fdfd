/* tests/fuzz/fuzz_buddy.c -- libFuzzer target: the buddy page heap against a reference model.
 *
 * Input: [mode u8][units u16] then ops of one opcode byte and its operands (fuzz_input.h).
 * The model is one state byte per unit (free, reserved, allocated) plus the order of each
 * allocated block at its first unit. After every op the fuzzer compares with the real heap:
 * the return code, the index alloc chose (lowest aligned run of free units), the order free
 * and block_order report, free units, nr_free for every order (maximal free aligned nodes,
 * i.e. fully coalesced), the largest free order, and kite_buddy_check() == 0. Ops:
 *   alloc (orders up to past the range and past KITE_BUDDY_MAX_ORDER), free of a live block,
 *   free of an arbitrary index (every error code), block_order of an arbitrary index,
 *   alloc_at of an arbitrary index and order (every error code),
 *   reserve and unreserve of arbitrary ranges (in bounds or not, busy or not).
 * init is also called with invalid arguments (0 units, short or misaligned metadata).
 * At the end everything is freed and unreserved: the heap must be one coalesced range again.
 * Any mismatch aborts with a message (libFuzzer keeps the input as a crash).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "kite/buddy.h"

#define MAX_UNITS 20000u

enum { U_FREE = 0, U_RSV = 1, U_ALLOC = 2 };

static unsigned char st[MAX_UNITS];      /* unit states */
static signed char start_order[MAX_UNITS]; /* order of the allocated block starting here, or -1 */
static uint64_t live[MAX_UNITS];
static uint64_t nlive;
static uint64_t units;
static _Alignas(16) unsigned char meta[64 * 1024];
static unsigned char allfree[MAX_UNITS]; /* scratch: node at this level fully free */

FZ_NOCOV static int m_alloc(unsigned order, uint64_t *idx) {
  if (order > KITE_BUDDY_MAX_ORDER || ((uint64_t)1 << order) > units) return KITE_BUDDY_EORDER;
  uint64_t sz = (uint64_t)1 << order;
  for (uint64_t s = 0; s + sz <= units; s += sz) {
    uint64_t u = s;
    while (u < s + sz && st[u] == U_FREE) u++;
    if (u == s + sz) {
      memset(st + s, U_ALLOC, sz);
      start_order[s] = (signed char)order;
      live[nlive++] = s;
      *idx = s;
      return 0;
    }
  }
  return KITE_BUDDY_ENOMEM;
}

/* alloc_at: the aligned block at i if every unit of it is free. */
FZ_NOCOV static int m_alloc_at(uint64_t i, unsigned order) {
  if (order > KITE_BUDDY_MAX_ORDER || ((uint64_t)1 << order) > units) return KITE_BUDDY_EORDER;
  uint64_t sz = (uint64_t)1 << order;
  if (i >= units || sz > units - i || (i & (sz - 1))) return KITE_BUDDY_ERANGE;
  for (uint64_t u = i; u < i + sz; u++)
    if (st[u] != U_FREE) return KITE_BUDDY_EBUSY;
  memset(st + i, U_ALLOC, sz);
  start_order[i] = (signed char)order;
  live[nlive++] = i;
  return 0;
}

/* Error the real heap must give for free/block_order at i, or the block's order (>= 0). */
static int m_locate(uint64_t i) {
  if (i >= units) return KITE_BUDDY_ERANGE;
  if (st[i] == U_RSV) return KITE_BUDDY_ERESERVED;
  if (st[i] == U_FREE) return KITE_BUDDY_EFREE;
  if (start_order[i] < 0) return KITE_BUDDY_ENOTSTART;
  return start_order[i];
}

FZ_NOCOV static void m_free(uint64_t i) {
  unsigned order = (unsigned)start_order[i];
  memset(st + i, U_FREE, (size_t)1 << order);
  start_order[i] = -1;
  for (uint64_t k = 0; k < nlive; k++)
    if (live[k] == i) { live[k] = live[--nlive]; break; }
}

FZ_NOCOV static int m_range(uint64_t s, uint64_t count, int reserve) {
  if (s > units || count > units - s) return KITE_BUDDY_ERANGE;
  unsigned char need = reserve ? U_FREE : U_RSV;
  for (uint64_t u = s; u < s + count; u++)
    if (st[u] != need && !(reserve && st[u] == U_RSV)) return KITE_BUDDY_EBUSY;
  memset(st + s, reserve ? U_RSV : U_FREE, count);
  return 0;
}

/* Compare every counter with the model: nr_free[k] counts the fully free nodes of order k
 * whose parent is not fully free (or lies past the range). */
FZ_NOCOV static void compare(const kite_buddy_t *b, const char *what) {
  int rc = kite_buddy_check(b);
  fz_check(rc == 0, "after %s: kite_buddy_check() = %d", what, rc);
  uint64_t fu = 0;
  for (uint64_t u = 0; u < units; u++) {
    allfree[u] = st[u] == U_FREE;
    fu += allfree[u];
  }
  fz_check(kite_buddy_free_units(b) == fu, "after %s: free units %llu, model %llu", what,
           (unsigned long long)kite_buddy_free_units(b), (unsigned long long)fu);
  int largest = -1;
  for (unsigned k = 0; k <= KITE_BUDDY_MAX_ORDER; k++) {
    uint64_t sz = (uint64_t)1 << k, count = 0;
    if (sz <= units) {
      /* allfree[s] holds "node (s, k) fully free"; parent (s & ~(2sz-1), k+1) exists when its
       * end is in range */
      for (uint64_t s = 0; s + sz <= units; s += sz) {
        if (!allfree[s]) continue;
        uint64_t ps = s & ~(2 * sz - 1);
        int parent_free = k < KITE_BUDDY_MAX_ORDER && ps + 2 * sz <= units && allfree[ps] &&
                          allfree[ps + sz];
        if (!parent_free) count++;
      }
      /* climb: node (s, k+1) is fully free when both halves are */
      for (uint64_t s = 0; s + 2 * sz <= units; s += 2 * sz)
        allfree[s] = allfree[s] && allfree[s + sz];
      for (uint64_t s = (units / (2 * sz)) * 2 * sz; s < units; s += sz) allfree[s] = 0;
    }
    uint64_t got = kite_buddy_free_blocks(b, k);
    fz_check(got == count, "after %s: nr_free[%u] = %llu, model %llu", what, k,
             (unsigned long long)got, (unsigned long long)count);
    if (count) largest = (int)k;
  }
  fz_check(kite_buddy_largest_free_order(b) == largest, "after %s: largest free order %d, model %d",
           what, kite_buddy_largest_free_order(b), largest);
}

static void bad_inits(uint8_t mode) {
  kite_buddy_t *b = NULL;
  uint64_t n = units;
  size_t need = kite_buddy_meta_size(n);
  fz_check(need > 0 && need <= sizeof(meta), "meta size %zu for %llu units", need,
           (unsigned long long)n);
  if (mode & 1)
    fz_check(kite_buddy_init(&b, meta, sizeof(meta), 0) == KITE_BUDDY_EINVAL, "0 units");
  if (mode & 2)
    fz_check(kite_buddy_init(&b, meta, need - 1, n) == KITE_BUDDY_EINVAL, "short metadata");
  if (mode & 4)
    fz_check(kite_buddy_init(&b, meta + 8, sizeof(meta) - 8, n) == KITE_BUDDY_EINVAL,
             "misaligned metadata");
  if (mode & 8)
    fz_check(kite_buddy_init(&b, meta, sizeof(meta), KITE_BUDDY_MAX_UNITS + 1) == KITE_BUDDY_EINVAL,
             "too many units");
  fz_check(kite_buddy_meta_size(0) == 0, "meta_size(0)");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in_t in = {data, size, 0};
  uint8_t mode = fz_u8(&in);
  units = 1 + fz_u16(&in) % (mode & 0x80 ? MAX_UNITS : 300);
  bad_inits(mode);
  kite_buddy_t *b = NULL;
  int rc = kite_buddy_init(&b, meta, kite_buddy_meta_size(units), units);
  fz_check(rc == 0 && b, "init(%llu units) = %d", (unsigned long long)units, rc);
  fz_check(kite_buddy_units(b) == units, "units");
  memset(st, U_FREE, units);
  memset(start_order, -1, units);
  nlive = 0;
  compare(b, "init");
  unsigned top = 0;
  while (((uint64_t)1 << top) < units) top++;

  for (unsigned step = 0; step < 2000 && !in.done; step++) {
    uint8_t op = fz_u8(&in);
    switch (op % 8) {
    case 0: case 1: { /* alloc */
      uint8_t o = fz_u8(&in);
      unsigned order = o == 255 ? KITE_BUDDY_MAX_ORDER + 1 + fz_u8(&in) % 8 : o % (top + 2);
      uint64_t idx = ~0ull, midx = ~0ull;
      int want = m_alloc(order, &midx);
      rc = kite_buddy_alloc(b, order, &idx);
      fz_check(rc == want, "alloc(%u) = %d, model %d", order, rc, want);
      if (rc == 0) fz_check(idx == midx, "alloc(%u) at %llu, model %llu", order,
                            (unsigned long long)idx, (unsigned long long)midx);
      break;
    }
    case 2: case 3: { /* free a live block */
      if (!nlive) break;
      uint64_t i = live[fz_u16(&in) % nlive];
      int o = m_locate(i);
      unsigned order = 99;
      rc = kite_buddy_free(b, i, &order);
      fz_check(rc == 0 && (int)order == o, "free(%llu) = %d order %u, model order %d",
               (unsigned long long)i, rc, order, o);
      m_free(i);
      break;
    }
    case 4: { /* free any index */
      uint64_t i = fz_u16(&in) % (units + 2);
      int want = m_locate(i);
      unsigned order = 99;
      rc = kite_buddy_free(b, i, &order);
      fz_check(rc == (want >= 0 ? 0 : want), "free(%llu) = %d, model %d", (unsigned long long)i,
               rc, want);
      if (rc == 0) {
        fz_check((int)order == want, "free order %u, model %d", order, want);
        m_free(i);
      }
      break;
    }
    case 5: { /* block_order of any index, or (bit 3 of the opcode) alloc_at there */
      uint64_t i = fz_u16(&in) % (units + 2);
      if (op & 8) {
        unsigned order = fz_u8(&in) % (top + 2);
        int want = m_alloc_at(i, order);
        rc = kite_buddy_alloc_at(b, i, order);
        fz_check(rc == want, "alloc_at(%llu, %u) = %d, model %d", (unsigned long long)i, order, rc, want);
        break;
      }
      int want = m_locate(i);
      rc = kite_buddy_block_order(b, i);
      fz_check(rc == want, "block_order(%llu) = %d, model %d", (unsigned long long)i, rc, want);
      break;
    }
    case 6: case 7: { /* reserve / unreserve */
      int reserve = op % 8 == 6;
      uint64_t s = fz_u16(&in) % (units + 2);
      uint8_t c = fz_u8(&in);
      uint64_t count = c < 200 ? c % 70 : fz_u16(&in) % (units + 2);
      int want = m_range(s, count, reserve);
      rc = reserve ? kite_buddy_reserve(b, s, count) : kite_buddy_unreserve(b, s, count);
      fz_check(rc == want, "%s(%llu, %llu) = %d, model %d", reserve ? "reserve" : "unreserve",
               (unsigned long long)s, (unsigned long long)count, rc, want);
      break;
    }
    }
    compare(b, "op");
  }

  /* Tear down: every block freed, every hole unreserved: one coalesced range again. */
  while (nlive) {
    uint64_t i = live[nlive - 1];
    rc = kite_buddy_free(b, i, NULL);
    fz_check(rc == 0, "final free(%llu) = %d", (unsigned long long)i, rc);
    m_free(i);
  }
  for (uint64_t u = 0; u < units; u++)
    if (st[u] == U_RSV) {
      uint64_t e = u;
      while (e < units && st[e] == U_RSV) e++;
      rc = kite_buddy_unreserve(b, u, e - u);
      fz_check(rc == 0, "final unreserve(%llu, %llu) = %d", (unsigned long long)u,
               (unsigned long long)(e - u), rc);
      memset(st + u, U_FREE, e - u);
      u = e;
    }
  compare(b, "teardown");
  fz_check(kite_buddy_free_units(b) == units, "not all free at the end");
  return 0;
}
