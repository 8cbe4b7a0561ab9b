// ASCII fast paths of the SDK's text conversions: keys, names, versions
// and most values are ASCII, for which UTF-16 to UTF-8 (and back) is a
// narrowing (a widening) of each unit. They work 16 units at a time with
// WebAssembly SIMD: a guest loop costs a check of the call's deadline per
// iteration (wazero's CloseOnContextDone), so a text of up to 16
// characters takes no loop at all. Both report failure on the first
// non-ASCII unit, and the caller takes the general path (index.ts).
//
// Loads stay inside memory the caller owns or that is mapped anyway: a
// text shorter than 16 bytes is loaded from the 16 bytes ending at its
// end (so up to 15 bytes before it, which exist: every pointer handed
// here is above MIN_PTR) and shifted into place; a longer one in chunks,
// the last one overlapping the one before.

// MIN_PTR: below it the 16-byte windows ending at a short text could start
// below address 0; such pointers take the general path.
// @ts-ignore: decorator
@inline export const MIN_PTR: usize = 32;

/**
 * Writes the n UTF-16 units at src to dst as UTF-8 if they are all ASCII
 * (one byte each) and returns true; false, with dst[0:n+16] clobbered,
 * otherwise. dst must have room for n+16 bytes (the last chunk is stored
 * whole).
 */
export function asciiEncode(src: usize, n: i32, dst: usize): bool {
  if (n == 0) return true;
  if (src < MIN_PTR) return false;
  if (n < 16) {
    // The 16 units ending at the text's end; the first 16-n are not ours.
    const end = src + (<usize>n << 1);
    const skip = i16x8.splat(<i16>(16 - n));
    const a = v128.and(v128.load(end - 32), i16x8.ge_u(i16x8(0, 1, 2, 3, 4, 5, 6, 7), skip));
    const b = v128.and(v128.load(end - 16), i16x8.ge_u(i16x8(8, 9, 10, 11, 12, 13, 14, 15), skip));
    if (v128.any_true(v128.and(v128.or(a, b), i16x8.splat(-128)))) return false;
    // Narrow, then move the text's n bytes to lanes 0..n-1 (the lanes
    // indexed past 15 become 0).
    const bytes = i8x16.narrow_i16x8_u(a, b);
    v128.store(dst, i8x16.swizzle(bytes, i8x16.add(i8x16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), i8x16.splat(<i8>(16 - n)))));
    return true;
  }
  let i = 0;
  for (; i + 16 <= n; i += 16) {
    if (!narrow16(src + (<usize>i << 1), dst + <usize>i)) return false;
  }
  // The last (overlapping) chunk: the 16 units ending at the end.
  return i == n || narrow16(src + (<usize>(n - 16) << 1), dst + <usize>(n - 16));
}

// narrow16 stores the 16 units at src as 16 bytes at dst if they are ASCII.
// @ts-ignore: decorator
@inline
function narrow16(src: usize, dst: usize): bool {
  const a = v128.load(src);
  const b = v128.load(src, 16);
  if (v128.any_true(v128.and(v128.or(a, b), i16x8.splat(-128)))) return false;
  v128.store(dst, i8x16.narrow_i16x8_u(a, b));
  return true;
}

/**
 * The n bytes at p as a string if they are all ASCII; null otherwise.
 */
export function asciiDecode(p: usize, n: i32): string | null {
  if (n == 0) return "";
  if (p < MIN_PTR) return null;
  if (n < 16) {
    // The 16 bytes ending at the text's end, moved to lanes 0..n-1.
    const v = i8x16.swizzle(v128.load(p + <usize>n - 16), i8x16.add(i8x16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), i8x16.splat(<i8>(16 - n))));
    if (i8x16.bitmask(v) != 0) return null;
    // Allocate whole vectors, store them, then shrink the string to its
    // length (__renew only sets the size when the block has room).
    const s = __new(n > 8 ? 32 : 16, idof<string>());
    v128.store(s, i16x8.extend_low_i8x16_u(v));
    if (n > 8) v128.store(s, i16x8.extend_high_i8x16_u(v), 16);
    return changetype<string>(__renew(s, <usize>n << 1));
  }
  // Widen chunk by chunk, the last one overlapping, and check them all at
  // the end (a non-ASCII text, rare, leaves the string as garbage).
  const s = __new(<usize>n << 1, idof<string>());
  let or = i8x16.splat(0);
  let i = 0;
  for (; i + 16 <= n; i += 16) or = v128.or(or, widen16(p + <usize>i, s + (<usize>i << 1)));
  if (i < n) or = v128.or(or, widen16(p + <usize>n - 16, s + (<usize>(n - 16) << 1)));
  return i8x16.bitmask(or) != 0 ? null : changetype<string>(s);
}

// widen16 stores the 16 bytes at p as 16 UTF-16 units at dst (right if
// they are ASCII) and returns them.
// @ts-ignore: decorator
@inline
function widen16(p: usize, dst: usize): v128 {
  const v = v128.load(p);
  v128.store(dst, i16x8.extend_low_i8x16_u(v));
  v128.store(dst, i16x8.extend_high_i8x16_u(v), 16);
  return v;
}
