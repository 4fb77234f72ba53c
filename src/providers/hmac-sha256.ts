import { randomBytes } from 'node:crypto';
import { resolveTemplate, parseBody, checkTemplate } from '../template.js';
import { payloadError, verificationError } from '../errors.js';
import type { Delivery, EventTypePlace, Provider, ResolvedSource } from './types.js';
import { anyMatches, bodyHashId, checkTolerance, decodeSignature, header, hmac, parseUnixSeconds, requireHeader } from './util.js';

/** The bytes signed: the `signedPayload` template with `{timestamp}` and `{body}` (default: the body). */
function signedBytes(template: string, timestamp: string | undefined, raw: Buffer): Buffer[] {
  const parts: Buffer[] = [];
  for (const piece of template.split(/(\{body\}|\{timestamp\})/)) {
    if (piece === '{body}') parts.push(raw);
    else if (piece === '{timestamp}') parts.push(Buffer.from(timestamp ?? ''));
    else if (piece !== '') parts.push(Buffer.from(piece));
  }
  return parts;
}

function defaultPayload(source: Pick<ResolvedSource, 'options'>): string {
  return source.options.signedPayload ?? (source.options.timestampHeader === undefined ? '{body}' : '{timestamp}.{body}');
}

/** Identification shared by the generic providers: `deliveryId` / `eventType` templates, else body hash. */
export function identifyByTemplate(d: Delivery, source: ResolvedSource) {
  const ctx = { body: parseBody(d.raw, d.headers['content-type']), headers: d.headers, source: source.name };
  const template = source.options.deliveryId;
  // A configured id template says where the id lives: absent there is a 400, not a silent
  // fallback to the body hash (a body that changes between retries would then duplicate).
  const id = template === undefined ? bodyHashId(d) : resolveTemplate(template, ctx);
  if (id === undefined) throw payloadError(`delivery id template ${template} resolved to nothing for this body`);
  const type = source.options.eventType === undefined ? undefined : resolveTemplate(source.options.eventType, ctx);
  return { deliveryId: id, eventType: type ?? 'unknown' };
}

/** Whether the `deliveryId` template reads a header: a header no signature of this provider covers. */
export function idTemplateReadsHeader(options: ResolvedSource['options']): boolean {
  return /\{header\./.test(options.deliveryId ?? '');
}

/** Where the `eventType` template reads the type, when it is one placeholder alone (`{body.type}`, `{header.x-event}`). */
export function templateEventTypeAt(options: ResolvedSource['options']): EventTypePlace | undefined {
  const m = /^\{(body|header)\.([^{}]+)\}$/.exec(options.eventType ?? '');
  if (m === null) return undefined;
  return m[1] === 'header' ? { header: m[2]!.toLowerCase() } : { body: m[2]!.split('.') };
}

export function validateTemplates(options: ResolvedSource['options']): string[] {
  const problems: string[] = [];
  for (const field of ['deliveryId', 'eventType'] as const) {
    const t = options[field];
    const p = t === undefined ? undefined : checkTemplate(t);
    if (p !== undefined) problems.push(`${field}: ${p}`);
  }
  return problems;
}

/** Generic HMAC-SHA256: configurable header, prefix, encoding, optional timestamp header. */
export const hmacSha256: Provider = {
  name: 'hmac-sha256',
  // The signature header is the source's own `header` setting (redacted per source).
  signatureHeaders: [],
  retryHorizonHours: 72,
  successStatus: 202,
  // An id read from a header is never signed (signedPayload signs only {timestamp} and {body}).
  unsignedDeliveryId: (options) => idTemplateReadsHeader(options),
  needsSecret: true,
  fields: ['toleranceSeconds', 'header', 'prefix', 'encoding', 'timestampHeader', 'signedPayload', 'deliveryId', 'eventType'],

  validate(options) {
    const problems = validateTemplates(options);
    if (options.header === undefined) problems.push('header: the generic provider needs the signature header\'s name, e.g. "X-Signature"');
    if (options.signedPayload !== undefined && !options.signedPayload.includes('{body}')) problems.push('signedPayload: must contain {body}');
    const signsTimestamp = options.signedPayload?.includes('{timestamp}') ?? options.timestampHeader !== undefined;
    // A signed timestamp without a header to read it from would sign ".<body>" and check
    // no freshness; a timestamp checked but not signed can be refreshed by anyone.
    if (signsTimestamp && options.timestampHeader === undefined) {
      problems.push('signedPayload: uses {timestamp} but no timestampHeader is set (try: set "timestampHeader" to the header carrying the signing time)');
    }
    if (options.timestampHeader !== undefined && !signsTimestamp) {
      problems.push(
        'timestampHeader: the timestamp is checked for freshness but signedPayload does not sign it, so anyone could refresh it (try: put {timestamp} in "signedPayload" as the sender signs it)',
      );
    }
    if (options.toleranceSeconds !== undefined && options.timestampHeader === undefined) {
      problems.push('toleranceSeconds: there is no timestamp to check without "timestampHeader" (try: set "timestampHeader", or remove "toleranceSeconds")');
    }
    return problems;
  },

  verify(d, source) {
    const o = source.options;
    let sig = requireHeader(d, o.header ?? '');
    const prefix = o.prefix ?? '';
    if (!sig.startsWith(prefix)) throw verificationError(`${o.header} must start with ${prefix}`);
    sig = sig.slice(prefix.length);
    const template = defaultPayload(source);
    // Never sign an empty timestamp (the configuration refuses this; the second line).
    if (template.includes('{timestamp}') && o.timestampHeader === undefined)
      throw verificationError('signedPayload uses {timestamp} but no timestampHeader is configured');
    let ts: string | undefined;
    if (o.timestampHeader !== undefined) {
      ts = header(d, o.timestampHeader);
      checkTolerance(parseUnixSeconds(ts, o.timestampHeader), d, source);
    }
    const parts = signedBytes(template, ts, d.raw);
    const presented = [decodeSignature(sig, o.encoding ?? 'hex')];
    if (!anyMatches(presented, source.secrets, (s) => hmac('sha256', s, ...parts))) throw verificationError('signature does not match');
  },

  identify: identifyByTemplate,

  sign(body, secret, now, source) {
    const o = source.options;
    const ts = String(Math.floor(now / 1000));
    const sig = hmac('sha256', secret, ...signedBytes(defaultPayload(source), ts, body)).toString(o.encoding ?? 'hex');
    const headers: Record<string, string> = { [(o.header ?? 'x-signature').toLowerCase()]: `${o.prefix ?? ''}${sig}` };
    if (o.timestampHeader !== undefined) headers[o.timestampHeader.toLowerCase()] = ts;
    return { headers };
  },

  sample() {
    return Buffer.from(JSON.stringify({ id: `test_${randomBytes(8).toString('hex')}`, type: 'test.event', data: { ok: true } }));
  },

  eventTypeAt: templateEventTypeAt,
};
