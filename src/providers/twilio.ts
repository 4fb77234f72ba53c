import { randomBytes, randomUUID } from 'node:crypto';
import { verificationError } from '../errors.js';
import type { Delivery, Provider, ResolvedSource } from './types.js';
import { anyMatches, bodyHashId, decodeSignature, header, hmac, jsonBody, requireHeader, safeEqual, sha256Hex, stringAt } from './util.js';

/**
 * The URL Twilio signed. Behind a proxy the receiver sees its own address, so a source may
 * set `publicUrl`: it is used as is when it has a query string, otherwise followed by the
 * query string of the request. Without it, the URL the receiver saw.
 */
function twilioSignedUrl(d: Pick<Delivery, 'url'>, source: Pick<ResolvedSource, 'options'>): string {
  const publicUrl = source.options.publicUrl;
  if (publicUrl === undefined) return d.url;
  if (publicUrl.includes('?')) return publicUrl;
  const q = d.url.indexOf('?');
  return q < 0 ? publicUrl : publicUrl + d.url.slice(q);
}

/**
 * Twilio's own validator tries the URL with and without the port (`:443`, `:80`), because
 * Twilio's signing is inconsistent about it; so do we.
 */
function urlVariants(url: string): string[] {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)([^/?#]*)(.*)$/s.exec(url);
  if (m === null) return [url];
  const [, scheme = '', authority = '', rest = ''] = m;
  const at = authority.lastIndexOf('@');
  const userinfo = authority.slice(0, at + 1);
  const hostPort = authority.slice(at + 1);
  const pm = /^(.*?)(?::(\d+))?$/s.exec(hostPort);
  const host = pm?.[1] ?? hostPort;
  const withoutPort = scheme + userinfo + host + rest;
  const withPort = pm?.[2] !== undefined ? url : `${scheme}${userinfo}${host}:${scheme.toLowerCase() === 'https://' ? 443 : 80}${rest}`;
  return withoutPort === withPort ? [url] : [withoutPort, withPort];
}

function queryParam(url: string, name: string): string | undefined {
  const q = url.indexOf('?');
  if (q < 0) return undefined;
  return new URLSearchParams(url.slice(q + 1).split('#')[0]).get(name) ?? undefined;
}

/**
 * The string Twilio signs for a form POST: the URL, then every parameter name followed by
 * its value, sorted by name (code-unit order); a repeated name contributes each of its
 * distinct values, sorted, as Twilio's SDK does.
 */
export function twilioSignedString(url: string, form: string): string {
  const params = new Map<string, Set<string>>();
  for (const [k, v] of new URLSearchParams(form)) {
    const values = params.get(k) ?? new Set<string>();
    values.add(v);
    params.set(k, values);
  }
  let data = url;
  for (const name of [...params.keys()].sort()) {
    for (const value of [...(params.get(name) ?? [])].sort()) data += name + value;
  }
  return data;
}

/**
 * Twilio: `X-Twilio-Signature`, base64 HMAC-SHA1 keyed by the auth token over the public
 * URL plus the sorted form parameters. JSON bodies are not in the string: their SHA-256
 * is in the URL as `bodySHA256`, which is signed, and must equal the body's.
 */
export const twilio: Provider = {
  name: 'twilio',
  signatureHeaders: ['x-twilio-signature'],
  // Twilio retries a failed webhook once (connection overrides can add a few more).
  retryHorizonHours: 1,
  successStatus: 202,
  // I-Twilio-Idempotency-Token is a header Twilio does not sign.
  unsignedDeliveryId: true,
  needsSecret: true,
  fields: ['publicUrl'],

  verify(d, source) {
    const presented = [decodeSignature(requireHeader(d, 'X-Twilio-Signature').trim(), 'base64')];
    const url = twilioSignedUrl(d, source);
    const bodyHash = queryParam(url, 'bodySHA256');
    if (bodyHash !== undefined) {
      // JSON body: the signature covers the URL (and so bodySHA256); the hash covers the body.
      if (!safeEqual(Buffer.from(bodyHash), Buffer.from(sha256Hex(d.raw)))) throw verificationError('bodySHA256 does not match the body');
    }
    const form = bodyHash === undefined ? d.raw.toString('utf8') : '';
    // Every URL variant and every secret is tried; no early exit.
    const results = urlVariants(url).map((u) => {
      const data = Buffer.from(twilioSignedString(u, form), 'utf8');
      return anyMatches(presented, source.secrets, (s) => hmac('sha1', s, data));
    });
    if (!results.includes(true)) throw verificationError('signature does not match (check the source\'s "publicUrl" if the receiver sits behind a proxy)');
  },

  identify(d) {
    // The idempotency token is kept across Twilio's retry of the same request.
    const id = header(d, 'I-Twilio-Idempotency-Token') ?? bodyHashId(d);
    const json = jsonBody(d);
    if (json !== undefined) return { deliveryId: id, eventType: stringAt(json, ['type']) ?? 'unknown' };
    const form = new URLSearchParams(d.raw.toString('utf8'));
    const call = form.get('CallStatus');
    const message = form.get('MessageStatus') ?? form.get('SmsStatus');
    const type = call ? `call.${call}` : message ? `message.${message}` : 'unknown';
    return { deliveryId: id, eventType: type };
  },

  /** `url` is the URL Twilio calls; for a JSON body it must carry `bodySHA256`. */
  sign(body, secret, _now, _source, url) {
    const json = queryParam(url, 'bodySHA256') !== undefined;
    const data = twilioSignedString(url, json ? '' : body.toString('utf8'));
    return {
      headers: {
        'x-twilio-signature': hmac('sha1', secret, data).toString('base64'),
        'content-type': json ? 'application/json' : 'application/x-www-form-urlencoded',
        'i-twilio-idempotency-token': randomUUID(),
      },
    };
  },

  sample() {
    const sid = `SM${randomBytes(16).toString('hex')}`;
    return Buffer.from(
      new URLSearchParams({
        AccountSid: 'ACXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX',
        ApiVersion: '2010-04-01',
        From: '+15017122661',
        MessageSid: sid,
        MessageStatus: 'delivered',
        SmsSid: sid,
        SmsStatus: 'delivered',
        To: '+15558675310',
      }).toString(),
    );
  },
};
