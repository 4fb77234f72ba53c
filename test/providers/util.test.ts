import { describe, expect, it } from 'vitest';
import { decodeSignature } from '../../src/providers/util.js';

describe('decodeSignature', () => {
  it('accepts only the canonical base64 spelling: the unused low bits of the last character matter', () => {
    const sig = '0/KCTR6DLpKmkAf8muzZqo1nDgQ=';
    expect(decodeSignature(sig, 'base64').length).toBe(20);
    expect(decodeSignature(sig.replace('Q=', 'Q'), 'base64').length).toBe(20);
    // 'R' differs from 'Q' only in the two bits a 20-byte value leaves unused.
    expect(decodeSignature(sig.replace('Q=', 'R='), 'base64').length).toBe(0);
    expect(decodeSignature(sig.replace('Q=', 'Q=='), 'base64').length).toBe(0);
    expect(decodeSignature('g0hM9SsE-OTPJTGt_tmIKtSyZlE3uFJELVlNIOLJ1OE', 'base64')).toEqual(
      decodeSignature('g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=', 'base64'),
    );
  });
});
