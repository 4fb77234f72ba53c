import type { CatchUpSettings } from './types.js';

/** Loopback names and addresses: a request to them never leaves the machine. */
const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/**
 * Sources whose catchUp.apiBase is plain http:// to another machine: the API credential
 * would cross the network in clear text (warned by check-config and serve, not refused:
 * a private network may be trusted). Loopback is not warned about: nothing crosses a
 * network there.
 */
export function plainApiBases(catchUp: ReadonlyMap<string, CatchUpSettings>): { fields: Record<string, unknown>; message: string }[] {
  const out: { fields: Record<string, unknown>; message: string }[] = [];
  for (const [name, c] of catchUp) {
    const url = new URL(c.apiBase);
    if (url.protocol !== 'http:' || LOOPBACK.test(url.hostname)) continue;
    out.push({
      fields: { source: name, apiBase: url.origin },
      message: `sources.${name}.catchUp.apiBase is http:// (${url.origin}): the API credential and every answer cross the network unencrypted; use https://`,
    });
  }
  return out;
}
