import { createHmac, hash, timingSafeEqual } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Delivery, ResolvedSource } from './types.js';
import { isBlank, type Secret } from '../config/secret.js';

/**
 * An HMAC of the parts. An empty key is refused (a verification error, so 401): with no
 * key bytes anyone can compute the signature. The configuration refuses such secrets when
 * it is loaded; this is the second line.
 */
export function hmac(algorithm: 'sha256' | 'sha1', key: string | Buffer, ...parts: (string | Buffer)[]): Buffer {
  if (key.length === 0) throw verificationError('refusing to check a signature with an empty key');
  const h = createHmac(algorithm, key);
  for (const p of parts) h.update(p);
  return h.digest();
}

/** SHA-256 in hex. The one-shot crypto.hash: no Hash object per call (bench/hash.mjs). */
export function sha256Hex(data: Buffer | string): string {
  return hash('sha256', data, 'hex');
}

/** Constant-time comparison; different lengths are unequal without comparing bytes. */
export function safeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Decodes a presented signature; anything undecodable becomes an empty buffer (never equal). */
export function decodeSignature(text: string, encoding: 'hex' | 'base64'): Buffer {
  if (encoding === 'hex') return /^[0-9a-fA-F]+$/.test(text) && text.length % 2 === 0 ? Buffer.from(text, 'hex') : Buffer.alloc(0);
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) return Buffer.alloc(0);
  const std = text.replaceAll('-', '+').replaceAll('_', '/');
  const bytes = Buffer.from(std, 'base64');
  // Only the canonical spelling (padded or not): Node ignores the unused low bits of the last
  // character, so without this check a changed signature character could still verify.
  const canonical = bytes.toString('base64');
  return std === canonical || std === canonical.replace(/=+$/, '') ? bytes : Buffer.alloc(0);
}

/**
 * True when any presented signature equals the expected one computed with any secret.
 * `expected` is called once per secret.
 */
export function anyMatches(presented: readonly Buffer[], secrets: readonly Secret[], expected: (secret: string) => Buffer): boolean {
  let ok = false;
  for (const secret of secrets) {
    // A blank secret is no secret (the configuration refuses it; this is the second line).
    if (isBlank(secret.reveal())) continue;
    const want = expected(secret.reveal());
    // No early exit: the time taken does not say which secret or signature matched.
    for (const p of presented) if (safeEqual(p, want)) ok = true;
  }
  return ok;
}

export function header(d: Delivery, name: string): string | undefined {
  const key = name.toLowerCase();
  // Own properties only: a header named `constructor` must not find Object.prototype's.
  const v = Object.hasOwn(d.headers, key) ? d.headers[key] : undefined;
  return v === undefined || v === '' ? undefined : v;
}

export function requireHeader(d: Delivery, name: string): string {
  const v = header(d, name);
  if (v === undefined) throw verificationError(`missing ${name} header`);
  return v;
}

/** Unix seconds from a header value; throws verification errors for absent or odd values. */
export function parseUnixSeconds(text: string | undefined, what: string): number {
  if (text === undefined || !/^\d{1,12}$/.test(text.trim())) throw verificationError(`missing or malformed ${what}`);
  return Number(text.trim());
}

/** Rejects a timestamp further than the tolerance from now, in either direction. */
export function checkTolerance(timestampSeconds: number, d: Delivery, source: ResolvedSource, defaultSeconds = 300): void {
  const tolerance = source.options.toleranceSeconds ?? defaultSeconds;
  const age = Math.abs(d.now / 1000 - timestampSeconds);
  if (age > tolerance) throw verificationError(`timestamp outside the ${tolerance}s tolerance`);
}

/** Parses the body as JSON for identification; undefined when it is not JSON. */
export function jsonBody(d: Delivery): unknown {
  try {
    return JSON.parse(d.raw.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** JSON body required (the id lives in it): 400 when it does not parse. */
export function requireJsonObject(d: Delivery, what: string): Record<string, unknown> {
  const body = jsonBody(d);
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw payloadError(`body is not a JSON object; ${what} lives in it`);
  return body as Record<string, unknown>;
}

export function stringAt(obj: unknown, path: readonly string[]): string | undefined {
  let cur: unknown = obj;
  for (const key of path) {
    if (cur === null || typeof cur !== 'object' || !Object.hasOwn(cur, key)) return undefined;
    cur = (cur as Record<string, unknown>)[key];
  }
  if (typeof cur === 'string' && cur !== '') return cur;
  if (typeof cur === 'number' && Number.isFinite(cur)) return String(cur);
  return undefined;
}

/**
 * A content hash of a JSON object without the fields a sender changes between honest
 * redeliveries of one event (see Identity.contentHash). Key order is the sender's own.
 */
export function jsonContentHash(body: Record<string, unknown>, volatile: readonly string[]): string {
  const rest: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body)) if (!volatile.includes(k)) rest[k] = v;
  return `json-without-${volatile.join(',')}:${sha256Hex(JSON.stringify(rest))}`;
}

/** The fallback delivery id for senders with none: stable across retries of the same bytes. */
export function bodyHashId(d: Delivery): string {
  return `sha256:${sha256Hex(d.raw)}`;
}
