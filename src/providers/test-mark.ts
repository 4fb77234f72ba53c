import { verificationError } from '../errors.js';
import type { Delivery, ResolvedSource } from './types.js';
import { anyMatches, decodeSignature, header, hmac, sha256Hex } from './util.js';

/**
 * The mark `receiver send-test` puts on the deliveries it signs, so the receiver stores them
 * as tests (origin `test`) and skips their routes unless asked to run them.
 *
 * `X-Receiver-Test: <mode>; mac=<hex>`, the mode `skip-effects` or `run-effects`, and the
 * MAC an HMAC-SHA256 over the source name, the mode and the SHA-256 of the body, keyed by a
 * key derived from the source's secret. Only whoever holds that secret can mark a delivery,
 * or turn a skip into a run: an outside sender (or anyone replaying a captured delivery
 * with the header added) cannot make a real delivery skip its effects. The derived key
 * keeps the mark from ever being a valid signature of the sender's own scheme (GitHub's is
 * an HMAC of the body under the secret itself). A source without a secret (provider
 * `none`) verifies nothing, its mark included: there the mode alone marks a test.
 */

export const TEST_MARK_HEADER = 'x-receiver-test';
export const TEST_MODES = ['skip-effects', 'run-effects'] as const;
export type TestMode = (typeof TEST_MODES)[number];

/** Why a test delivery's routes did not run (stored as its route decision). */
export const TEST_SKIPPED = 'test delivery (send-test --run-effects runs its effects)';

const markKey = (secret: string) => hmac('sha256', secret, 'receiver send-test mark key v1');
const markMac = (secret: string, source: string, mode: TestMode, body: Buffer) =>
  hmac('sha256', markKey(secret), `receiver send-test mark v1\n${source}\n${mode}\n${sha256Hex(body)}`);

/** The header value that marks `body` as a test delivery to `source` (signed with `secret` when it has one). */
export function testMark(source: string, mode: TestMode, body: Buffer, secret: string | undefined): string {
  return secret === undefined || secret === '' ? mode : `${mode}; mac=${markMac(secret, source, mode, body).toString('hex')}`;
}

/**
 * The test mode a verified delivery is marked with, or undefined when it carries no mark.
 * A mark that does not verify is refused (401), never taken for a real delivery: what
 * send-test sent as a test must never run effects because a secret changed.
 */
export function readTestMark(d: Delivery, source: ResolvedSource): TestMode | undefined {
  const value = header(d, TEST_MARK_HEADER);
  if (value === undefined) return undefined;
  const m = /^(skip-effects|run-effects)(?:; *mac=([0-9a-f]{64}))?$/.exec(value.trim());
  if (m === null) throw verificationError(`${TEST_MARK_HEADER} must be "skip-effects; mac=<hex>" or "run-effects; mac=<hex>" (receiver send-test sets it)`);
  const mode = m[1] as TestMode;
  const secrets = [...new Set([...source.secrets, ...source.keys.values()])];
  if (!source.provider.needsSecret && secrets.length === 0) return mode;
  const presented = m[2] === undefined ? [] : [decodeSignature(m[2], 'hex')];
  if (!anyMatches(presented, secrets, (s) => markMac(s, source.name, mode, d.raw))) {
    throw verificationError(`${TEST_MARK_HEADER} mark does not match (send-test signs it with the source's secret)`);
  }
  return mode;
}
