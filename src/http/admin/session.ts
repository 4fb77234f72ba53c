import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Secret } from '../../config/secret.js';

/**
 * The admin session, kept by the browser alone: a cookie `<expires>.<nonce>.<signature>`,
 * signed with a key derived from the admin token. Nothing is stored on the server, so a
 * restart keeps sessions and changing the token ends every one of them.
 *
 * The CSRF token of a session is a second signature over its nonce: a form carries it, and
 * a page from another site can neither read the cookie nor compute the token.
 */

export const SESSION_COOKIE = 'receiver_admin';

const b64url = (b: Buffer) => b.toString('base64url');

export class Sessions {
  readonly #key: Buffer;
  readonly #tokenMac: Buffer;

  constructor(
    token: Secret,
    readonly lifetimeMs: number,
    private readonly random: (n: number) => Buffer = randomBytes,
  ) {
    // A key of its own, not the token itself: a leaked cookie says nothing about the token.
    this.#key = createHmac('sha256', token.reveal()).update('receiver admin session v1').digest();
    this.#tokenMac = this.#mac(`token.${token.reveal()}`);
  }

  #mac(text: string): Buffer {
    return createHmac('sha256', this.#key).update(text).digest();
  }

  /**
   * Whether `given` is the admin token. Both sides are MACed first and compared with
   * timingSafeEqual, so the time taken says nothing about the token, not even its length.
   */
  isToken(given: string): boolean {
    return timingSafeEqual(this.#mac(`token.${given}`), this.#tokenMac);
  }

  /** A new session cookie value, valid until now + lifetime. */
  issue(now: number): string {
    const payload = `${now + this.lifetimeMs}.${b64url(this.random(18))}`;
    return `${payload}.${b64url(this.#mac(`session.${payload}`))}`;
  }

  /** The session's nonce when the cookie is ours, intact and not expired; else undefined. */
  verify(cookie: string | undefined, now: number): string | undefined {
    if (cookie === undefined) return undefined;
    const m = /^(\d{1,15})\.([A-Za-z0-9_-]{24})\.([A-Za-z0-9_-]{43})$/.exec(cookie);
    if (m === null) return undefined;
    const [, expires, nonce, signature] = m as unknown as [string, string, string, string];
    const expected = this.#mac(`session.${expires}.${nonce}`);
    if (!timingSafeEqual(Buffer.from(signature, 'base64url'), expected)) return undefined;
    if (Number(expires) <= now) return undefined;
    return nonce;
  }

  /** The CSRF token forms of this session carry. */
  csrfToken(nonce: string): string {
    return b64url(this.#mac(`csrf.${nonce}`));
  }

  isCsrfToken(nonce: string, given: unknown): boolean {
    if (typeof given !== 'string' || !/^[A-Za-z0-9_-]{43}$/.test(given)) return false;
    return timingSafeEqual(Buffer.from(given, 'base64url'), this.#mac(`csrf.${nonce}`));
  }
}

/**
 * Failed token checks (login form and API alike) slow further tries: after `freeFailures`
 * in a row, each try must wait twice as long as the last, up to `maxDelayMs`. While it
 * must wait, no token is checked at all, so guessing faster gains nothing. One counter for
 * the whole listener, not per address: behind a proxy every client has the proxy's address.
 */
export class LoginThrottle {
  #failures = 0;
  #lastFailureAt = 0;

  constructor(
    private readonly now: () => number,
    private readonly options: { freeFailures?: number; baseDelayMs?: number; maxDelayMs?: number } = {},
  ) {}

  /** Milliseconds to wait before a token may be checked again; 0 when it may be now. */
  waitMs(): number {
    const { freeFailures = 3, baseDelayMs = 1000, maxDelayMs = 60_000 } = this.options;
    if (this.#failures < freeFailures) return 0;
    const delay = Math.min(maxDelayMs, baseDelayMs * 2 ** (this.#failures - freeFailures));
    return Math.max(0, this.#lastFailureAt + delay - this.now());
  }

  failed(): void {
    this.#failures += 1;
    this.#lastFailureAt = this.now();
  }

  succeeded(): void {
    this.#failures = 0;
  }
}
