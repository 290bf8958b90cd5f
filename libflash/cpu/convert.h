// libflash/cpu/convert.h -- fp16/bf16 <-> fp32 on the host, bit-exact round-to-nearest-even, no
// dependency on compiler half types.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../flash.h"
#include "../params.h"

namespace flash::cpu {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t{h} << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // subnormal: value = mant * 2^-24
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;               // overflow (>= 65520 rounds to inf)
  if (a < 0x38800000u) {                                      // subnormal or zero in fp16
    // value / 2^-24, rounded to nearest even
    const float scaled = bits_to_float(a) * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  r -= 0x38000000u;                             // rebias exponent 127 -> 15
  return sign | static_cast<uint16_t>(r >> 13);
}

template <DType T> struct Elem;
template <> struct Elem<DType::FP32> {
  using storage = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
template <> struct Elem<DType::FP16> {
  using storage = uint16_t;
  static float load(uint16_t x) { return fp16_to_float(x); }
  static uint16_t store(float x) { return float_to_fp16(x); }
};
template <> struct Elem<DType::BF16> {
  using storage = uint16_t;
  static float load(uint16_t x) { return bf16_to_float(x); }
  static uint16_t store(float x) { return float_to_bf16(x); }
};

// The one switch from a call's runtime dtype to typed code: returns f(std::integral_constant<DType, T>{}).
template <class F>
int32_t with_dtype(DType t, F&& f) {
  switch (t) {
    case DType::FP32: return f(std::integral_constant<DType, DType::FP32>{});
    case DType::FP16: return f(std::integral_constant<DType, DType::FP16>{});
    case DType::BF16: return f(std::integral_constant<DType, DType::BF16>{});
  }
  return FLASH_ERROR_INTERNAL;
}

}  // namespace flash::cpu
