/* src/sizeclass.c -- the size-class tables (formulas in sizeclass.h). */
#include "sizeclass.h"
#include "message.h"

const uintptr_t _kite_desc_ratio_m1 = KITE_UNIT_SIZE / sizeof(kite_page_t) - 1; /* types.h */
const uint32_t _kite_class_size_[KITE_CLASSES] = {
  16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192,
  208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512,
  576, 640, 704, 768, 832, 896, 960, 1024, 1152, 1280, 1408, 1536,
  1664, 1792, 1920, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096,
  4608, 5120, 5632, 6144, 6656, 7168, 7680, 8192, 9216, 10240, 11264, 12288,
  13312, 14336, 15360, 16384, 18432, 20480, 22528, 24576, 26624, 28672, 30720, 32768,
  36864, 40960, 45056, 49152, 53248, 57344, 61440, 65536,
};
const uint8_t _kite_class_order_[KITE_CLASSES] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
};
bool _kite_sizeclass_check(void) {
  for (unsigned c = 0; c < KITE_CLASSES; c++) {
    size_t sz = c < 8 ? 16 * (c + 1) : ((size_t)128 << ((c - 8) / 8)) + ((size_t)((c - 8) % 8 + 1) << ((c - 8) / 8 + 4));
    unsigned order = 0;
    while (((KITE_UNIT_SIZE << order) / sz) < 8 && sz > KITE_SINGLE_UNIT_MAX) order++;
    if (_kite_class_size_[c] != sz || _kite_class_order_[c] != order) return _kite_check_failed("size class table", c);
    if ((KITE_UNIT_SIZE << order) > KITE_SMALL_PAGE_MAX) return _kite_check_failed("size class: page above KITE_SMALL_PAGE_MAX", c);
    if (_kite_class_of(sz) != c) return _kite_check_failed("size -> class map", c);
    if (c > 0 && _kite_class_of(_kite_class_size_[c - 1] + 1) != c) return _kite_check_failed("size -> class map", c);
  }
  for (unsigned s = 0; s < KITE_DIRECT_SLOTS; s++) {
    unsigned c = _kite_class_of(s);
    if (c >= KITE_DIRECT_CLASSES || s < _kite_class_direct_lo(c) || s > _kite_class_direct_hi(c))
      return _kite_check_failed("direct slot table", s);
  }
  return true;
}
