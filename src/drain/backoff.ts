export interface BackoffPolicy {
  baseSeconds: number;
  maxSeconds: number;
}

/**
 * Full-jitter exponential backoff, in ms: `random() * min(maxSeconds, baseSeconds * 2^(attempt-1))`.
 * `attempt` is the attempt that just failed (1 for the first). `random` is injected so tests
 * can pin it; spreading retries at random keeps a recovering target from a thundering herd.
 */
export function backoffMs(attempt: number, policy: BackoffPolicy, random: () => number = Math.random): number {
  const ceiling = Math.min(policy.maxSeconds, policy.baseSeconds * 2 ** Math.max(0, attempt - 1));
  return Math.round(random() * ceiling * 1000);
}

/**
 * When to try a failed event again: after the backoff, or after the target's Retry-After when
 * that is later (capped at maxSeconds, so a bogus Retry-After cannot park an event for years).
 */
export function nextAttemptAt(now: number, attempt: number, policy: BackoffPolicy, random: () => number, retryAfterMs?: number): number {
  const backoff = backoffMs(attempt, policy, random);
  const asked = retryAfterMs === undefined ? 0 : Math.min(Math.max(0, retryAfterMs), policy.maxSeconds * 1000);
  return now + Math.max(backoff, asked);
}
