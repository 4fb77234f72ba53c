import type { Context, MiddlewareHandler } from 'hono';

/**
 * The admin pages' security headers. The pages run no script at all (forms and links
 * only), so the policy allows none; styles come from our own stylesheet; no other site may
 * frame the pages (clickjacking a replay button) or receive their addresses as referrer.
 */
export const CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

export function securityHeaders({ now = () => performance.now() }: { now?: () => number } = {}): MiddlewareHandler {
  return async function adminSecurityHeaders(c, next) {
    const started = now();
    await next();
    const h = c.res.headers;
    h.set('content-security-policy', CONTENT_SECURITY_POLICY);
    h.set('x-content-type-options', 'nosniff');
    h.set('x-frame-options', 'DENY');
    h.set('referrer-policy', 'no-referrer');
    // Event bodies and headers are customer data: never kept by a browser or proxy cache.
    h.set('cache-control', 'no-store');
    // How long the server took (the admin benchmark reads it).
    h.set('server-timing', `app;dur=${(now() - started).toFixed(2)}`);
  };
}

/** The host the browser addressed: the proxy's X-Forwarded-Host when it sets one, else Host. */
function addressedHost(c: Context): string | undefined {
  return c.req.header('x-forwarded-host')?.split(',')[0]?.trim() ?? c.req.header('host');
}

/**
 * Whether the request came from a page of another origin, by what the browser says
 * (Sec-Fetch-Site, then Origin). Applied to requests carrying only the session cookie; a
 * request with neither header (curl, an old browser's same-origin GET) is not refused here.
 */
export function fromAnotherOrigin(c: Context): boolean {
  const site = c.req.header('sec-fetch-site');
  if (site !== undefined) return site !== 'same-origin' && site !== 'none';
  const origin = c.req.header('origin');
  if (origin === undefined) return false;
  try {
    return new URL(origin).host !== addressedHost(c);
  } catch {
    // "null" (a sandboxed frame, a redirect across origins) or garbage: not ours.
    return true;
  }
}

/** Whether the browser's connection is HTTPS: directly, or as the TLS proxy says. */
export function overHttps(c: Context): boolean {
  return new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto')?.split(',')[0]?.trim() === 'https';
}

/** Whether an address is this host's own (127.0.0.0/8, ::1, or IPv4 loopback written as IPv6). */
function isLoopback(address: string): boolean {
  return address === '::1' || /^(::ffff:)?127\./.test(address);
}

/**
 * The client's address, for the login throttle: the connection's peer; when the peer is
 * this host and says X-Forwarded-For (the TLS proxy on the same machine the README sets
 * up), the address that proxy saw, the list's last entry (the one it appended). A peer
 * elsewhere is never believed: any client could send the header.
 */
export function clientAddress(c: Context): string {
  const peer = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket?.remoteAddress ?? 'unknown';
  if (!isLoopback(peer)) return peer;
  const forwarded = c.req.header('x-forwarded-for')?.split(',').at(-1)?.trim();
  return forwarded === undefined || forwarded === '' ? peer : forwarded;
}
