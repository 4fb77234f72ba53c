import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Secret } from '../../config/secret.js';

/**
 * The admin session: a cookie `<expires>.<nonce>.<signature>`, signed with a key derived
 * from the admin token, and a row in the database (`admin_sessions`, by the SHA-256 of the
 * nonce) while it lasts. A request needs both: logging out deletes the row, so the cookie
 * stops working at once, on every receiver sharing the database; a restart keeps
 * sessions; changing the token ends every one of them (no cookie verifies any more).
 *
 * The CSRF token of a session is a second signature over its nonce: a form carries it, and
 * a page from another site can neither read the cookie nor compute the token. An action's
 * outcome travels to the page it redirects to sealed the same way (seal/unseal), so no
 * link from elsewhere can make a page announce an action that did not happen.
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

  /** A new session: its cookie value, valid until now + lifetime, and its nonce. */
  issue(now: number): { cookie: string; nonce: string; expiresAt: number } {
    const expiresAt = now + this.lifetimeMs;
    const nonce = b64url(this.random(18));
    const payload = `${expiresAt}.${nonce}`;
    return { cookie: `${payload}.${b64url(this.#mac(`session.${payload}`))}`, nonce, expiresAt };
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

  /** `text` with this session's signature, for a URL: only this session's pages unseal it. */
  seal(nonce: string, text: string): string {
    const payload = b64url(Buffer.from(text, 'utf8'));
    return `${payload}.${b64url(this.#mac(`seal.${nonce}.${payload}`))}`;
  }

  /** What seal() sealed for this session; undefined for anything else. */
  unseal(nonce: string, sealed: string | undefined): string | undefined {
    const m = sealed === undefined ? null : /^([A-Za-z0-9_-]{1,4000})\.([A-Za-z0-9_-]{43})$/.exec(sealed);
    if (m === null) return undefined;
    if (!timingSafeEqual(Buffer.from(m[2]!, 'base64url'), this.#mac(`seal.${nonce}.${m[1]!}`))) return undefined;
    return Buffer.from(m[1]!, 'base64url').toString('utf8');
  }
}

/** The session's row id in `admin_sessions`: the nonce's SHA-256 (the database never holds the nonce). */
export function sessionId(nonce: string): string {
  return createHash('sha256').update(nonce).digest('hex');
}

/**
 * Failed token checks (login form and API alike) slow further tries from the same client
 * address: after `freeFailures` in a row, each try must wait twice as long as the last, up
 * to `maxDelayMs`, a few seconds. While it must wait, no token from that address is checked
 * at all, so guessing faster gains nothing, and a client elsewhere is never slowed: a
 * flood of wrong tokens from one address holds back only that address, and the correct
 * token from any other address is checked at once. Quiet addresses are forgotten after
 * `forgetMs`; at most `maxAddresses` are remembered (the oldest go first).
 */
export class LoginThrottle {
  readonly #failures = new Map<string, { count: number; lastAt: number }>();

  constructor(
    private readonly now: () => number,
    private readonly options: { freeFailures?: number; baseDelayMs?: number; maxDelayMs?: number; forgetMs?: number; maxAddresses?: number } = {},
  ) {}

  /** Milliseconds `address` must wait before a token of its may be checked; 0 when it may be now. */
  waitMs(address: string): number {
    const { freeFailures = 3, baseDelayMs = 1000, maxDelayMs = 4000 } = this.options;
    const f = this.#live(address);
    if (f === undefined || f.count < freeFailures) return 0;
    const delay = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(30, f.count - freeFailures));
    return Math.max(0, f.lastAt + delay - this.now());
  }

  failed(address: string): void {
    const count = (this.#live(address)?.count ?? 0) + 1;
    // Re-inserted, so the map's order is the order of last failures: the oldest is first.
    this.#failures.delete(address);
    this.#failures.set(address, { count, lastAt: this.now() });
    const { maxAddresses = 10_000 } = this.options;
    for (const oldest of this.#failures.keys()) {
      if (this.#failures.size <= maxAddresses) break;
      this.#failures.delete(oldest);
    }
  }

  succeeded(address: string): void {
    this.#failures.delete(address);
  }

  /** The address's failures, unless it has been quiet for forgetMs. */
  #live(address: string): { count: number; lastAt: number } | undefined {
    const f = this.#failures.get(address);
    if (f !== undefined && this.now() - f.lastAt > (this.options.forgetMs ?? 15 * 60_000)) {
      this.#failures.delete(address);
      return undefined;
    }
    return f;
  }
}
