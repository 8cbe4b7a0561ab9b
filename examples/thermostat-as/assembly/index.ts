// The thermostat rule in AssemblyScript (see README.md): it watches
// thermostat1/setPoint, clamps a numeric set point into [16, 28], writes the
// result to hvac1/target (and back to the set point when clamping changed
// it), reports a set point that is not a number in thermostat1/error, and
// deletes hvac1/target when the set point is deleted.
//
// It behaves exactly like the Go rule (examples/thermostat-go), which uses
// strconv: a set point is read as the nearest float64 (correctly rounded)
// and written in the shortest form that reads back as the same float64
// ("28", "21.5", "19.25"). AssemblyScript's own parseFloat and toString do
// neither ("28.0"; not correctly rounded), so this file does both exactly,
// with integers, for the only range it needs: [16, 28].

import {
  Event, Op, Status, del, handle, lastError, set, setBytes, watch,
} from "../../../abi/guest/assemblyscript/assembly";
export {
  ssrun_abi_version, ssrun_alloc, ssrun_on_event, ssrun_event_coalesced,
} from "../../../abi/guest/assemblyscript/assembly";

const SET_POINT = "thermostat1/setPoint";
const TARGET = "hvac1/target";
const ERROR = "thermostat1/error";

// Bounds of the set point.
const LOW: u64 = 16;
const HIGH: u64 = 28;

// FRAC is the binary scale of the result: every float64 in [16, 32) is a
// multiple of 2^-48, so the clamped set point is mantissa * 2^-48.
const FRAC: i32 = 48;

// KEEP is how many fraction digits decide the rounding: the remainder of a
// fraction scaled by 2^k is a multiple of 2^k/10^KEEP, on which grid 1/2
// lies for KEEP > k, so the digits after KEEP only break a tie (sticky).
const KEEP = 64;

// Formatting works in units of 2^-50 (a quarter of the float64 spacing).
const UNIT: i32 = 50;
const UNIT_MASK: u64 = (<u64>1 << UNIT) - 1;

if (watch(SET_POINT) != Status.OK) {
  throw new Error("watch " + SET_POINT + ": " + lastError());
}
handle(onEvent);

function onEvent(ev: Event): Status {
  if (ev.key != SET_POINT) return Status.OK;
  if (ev.op == Op.Delete) return absentOK(del(TARGET)); // HVAC off
  if (ev.op != Op.Set) return Status.OK;

  const r = read(ev.value);
  if (!r.valid) {
    return setBytes(ERROR, concat('invalid set point "', ev.value, '"')).status;
  }
  const text = shortest(r.mantissa);
  let st = set(TARGET, text).status;
  if (st != Status.OK) return st;
  if (r.clamped) {
    st = set(SET_POINT, text).status;
    if (st != Status.OK) return st;
  }
  return absentOK(del(ERROR));
}

// absentOK treats NOT_FOUND (nothing to delete) as success.
function absentOK(st: Status): Status {
  return st == Status.NotFound ? Status.OK : st;
}

function concat(prefix: string, value: Uint8Array, suffix: string): Uint8Array {
  const p = Uint8Array.wrap(String.UTF8.encode(prefix));
  const s = Uint8Array.wrap(String.UTF8.encode(suffix));
  const b = new Uint8Array(p.length + value.length + s.length);
  b.set(p, 0);
  b.set(value, p.length);
  b.set(s, p.length + value.length);
  return b;
}

// ---------------------------------------------------------------------------
// Reading a set point.

class Reading {
  valid: bool = false;
  // mantissa is the clamped value in units of 2^-48.
  mantissa: u64 = 0;
  // clamped: the value read differs from the clamped one.
  clamped: bool = false;
}

function below(r: Reading): Reading {
  r.mantissa = LOW << FRAC;
  r.clamped = true;
  return r;
}

function above(r: Reading): Reading {
  r.mantissa = HIGH << FRAC;
  r.clamped = true;
  return r;
}

function isSpace(c: u8): bool {
  return c == 0x20 || (c >= 0x09 && c <= 0x0d); // " \t\n\v\f\r"
}

function isDigit(c: u8): bool {
  return c >= 0x30 && c <= 0x39;
}

// read parses a decimal number (surrounding ASCII whitespace allowed):
// [+-] digits [. digits] [(e|E) [+-] digits], with at least one mantissa
// digit. It rounds to the nearest float64 (ties to even), clamps into
// [LOW, HIGH] and returns the result as a mantissa.
function read(b: Uint8Array): Reading {
  const r = new Reading();
  let i = 0;
  let n = b.length;
  while (i < n && isSpace(b[i])) i++;
  while (n > i && isSpace(b[n - 1])) n--;

  let negative = false;
  if (i < n && (b[i] == 0x2b || b[i] == 0x2d)) { // + -
    negative = b[i] == 0x2d;
    i++;
  }
  // Significant digits (leading zeros dropped) and the position of the
  // decimal point relative to them: value = 0.DIGITS * 10^point.
  const digits = new Array<u8>();
  let point: i64 = 0;
  let mantissaDigits = 0;
  let seenPoint = false;
  for (; i < n; i++) {
    const c = b[i];
    if (c == 0x2e && !seenPoint) { // .
      seenPoint = true;
      continue;
    }
    if (!isDigit(c)) break;
    mantissaDigits++;
    if (digits.length == 0 && c == 0x30) {
      if (seenPoint) point--;
      continue;
    }
    digits.push(c - 0x30);
    if (!seenPoint) point++;
  }
  if (mantissaDigits == 0) return r;
  if (i < n && (b[i] == 0x65 || b[i] == 0x45)) { // e E
    i++;
    let expNegative = false;
    if (i < n && (b[i] == 0x2b || b[i] == 0x2d)) {
      expNegative = b[i] == 0x2d;
      i++;
    }
    let exp: i64 = 0;
    let expDigits = 0;
    for (; i < n && isDigit(b[i]); i++) {
      expDigits++;
      if (exp < 1_000_000_000) exp = exp * 10 + <i64>(b[i] - 0x30); // larger is out of range anyway
    }
    if (expDigits == 0) return r;
    point += expNegative ? -exp : exp;
  }
  if (i != n) return r;
  r.valid = true;

  // The value is 0 or negative, or has `point` integer digits.
  if (digits.length == 0 || negative || point < 2) return below(r);
  if (point > 2) return above(r);
  const whole = <u64>digits[0] * 10 + (digits.length > 1 ? <u64>digits[1] : 0);
  if (whole < 15) return below(r);
  if (whole > HIGH) return above(r);
  if (whole == 15) {
    // Values from 16 - 2^-50 (the midpoint to the float64 below 16; the tie
    // goes to 16, whose mantissa is even) up read as 16.
    const f = new Fraction(digits, 2, 50);
    if (f.whole != (<u64>1 << 50) - 1) return below(r);
    r.mantissa = LOW << FRAC;
    return r;
  }
  const q = new Fraction(digits, 2, FRAC).rounded();
  if (whole == HIGH && q != 0) return above(r);
  r.mantissa = (whole << FRAC) + q;
  return r;
}

// Fraction is 0.DIGITS[from:] scaled by 2^bits: its whole part and whether
// the rest is below, at or above one half.
class Fraction {
  whole: u64 = 0;
  // half: -1 below one half, 0 exactly one half, 1 above.
  half: i32 = 0;

  constructor(digits: Array<u8>, from: i32, bits: i32) {
    const d = new StaticArray<u8>(KEEP);
    let sticky = false;
    for (let j = from; j < digits.length; j++) {
      if (j - from < KEEP) d[j - from] = digits[j];
      else if (digits[j] != 0) sticky = true;
    }
    for (let k = 0; k < bits; k++) { // double the decimal fraction
      let carry: u8 = 0;
      for (let j = KEEP - 1; j >= 0; j--) {
        const x = d[j] * 2 + carry;
        d[j] = x % 10;
        carry = x / 10;
      }
      this.whole = this.whole * 2 + carry;
    }
    let rest = sticky;
    for (let j = 1; j < KEEP; j++) if (d[j] != 0) rest = true;
    if (d[0] != 5) this.half = d[0] > 5 ? 1 : -1;
    else this.half = rest ? 1 : 0;
  }

  // rounded is the whole part rounded to nearest, ties to even.
  rounded(): u64 {
    if (this.half > 0 || (this.half == 0 && (this.whole & 1) != 0)) return this.whole + 1;
    return this.whole;
  }
}

// ---------------------------------------------------------------------------
// Writing a set point: the shortest decimal that reads back as the same
// float64, the closest one to it when several are that short (ties to
// even), as Go's strconv.FormatFloat(v, 'g', -1, 64) prints a value in
// [16, 28].

// Scaled is x * 2^-50 multiplied by 10^f, one digit at a time: its whole
// part and the numerator of the rest.
class Scaled {
  whole: u64;
  rest: u64;
  constructor(x: u64) {
    this.whole = x >> UNIT;
    this.rest = x & UNIT_MASK;
  }
  next(): void {
    const t = this.rest * 10;
    this.whole = this.whole * 10 + (t >> UNIT);
    this.rest = t & UNIT_MASK;
  }
}

function shortest(mantissa: u64): string {
  const v = mantissa << (UNIT - FRAC);
  // Every number in [lo, hi] reads as v: the half gaps to the neighbours
  // are 2^-49, except below 16 (a power of two) where it is 2^-50. The
  // bounds themselves read as v when its mantissa is even.
  const lo = new Scaled(v - (mantissa == LOW << FRAC ? 1 : 2));
  const hi = new Scaled(v + 2);
  const x = new Scaled(v);
  const inclusive = (mantissa & 1) == 0;
  const HALF: u64 = <u64>1 << (UNIT - 1);
  for (let f = 0; f <= 17; f++) {
    if (f > 0) {
      lo.next();
      hi.next();
      x.next();
    }
    let first = lo.whole + (lo.rest != 0 ? 1 : 0);
    if (lo.rest == 0 && !inclusive) first++;
    let last = hi.whole;
    if (hi.rest == 0 && !inclusive) last--;
    if (first > last) continue;
    let k = x.whole;
    if (x.rest > HALF || (x.rest == HALF && (k & 1) != 0)) k++;
    if (k < first) k = first;
    if (k > last) k = last;
    return decimal(k, f);
  }
  unreachable(); // 17 significant digits always suffice
  return "";
}

// decimal formats k * 10^-f.
function decimal(k: u64, f: i32): string {
  let s = k.toString();
  if (f == 0) return s;
  while (s.length <= f) s = "0" + s;
  return s.substring(0, s.length - f) + "." + s.substring(s.length - f);
}
