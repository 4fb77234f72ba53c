/**
 * Hostile requests for the HTTP layer: a hand-written corpus of nasty cases and a fast-check
 * generator of random ones. Each case is the exact bytes written on a fresh connection, so
 * nothing (no client library) tidies up a broken request first.
 */
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import type { ResolvedSource } from '../../src/providers/types.js';
import { signShop } from './harness.js';

/** The sources the fuzz server knows: the generic HMAC one and three named senders. */
export const fuzzSources = {
  shop: {
    provider: 'hmac-sha256',
    header: 'X-Signature',
    encoding: 'hex',
    secret: 'env:RELIABILITY_SECRET',
    deliveryId: '{body.id}',
    eventType: '{body.type}',
  },
  stripe: { provider: 'stripe', secret: 'whsec_reliability_fuzz' },
  gh: { provider: 'github', secret: 'gh-reliability-fuzz' },
  sw: { provider: 'standard-webhooks', secret: `whsec_${Buffer.from('reliability-fuzz-standard-key').toString('base64')}` },
};
export type FuzzSourceName = keyof typeof fuzzSources;
const SOURCE_NAMES = Object.keys(fuzzSources) as FuzzSourceName[];

/** How the body is framed on the wire. */
export type Framing = 'length' | 'none' | 'chunked' | 'short-length' | 'truncated' | 'reset';

export interface FuzzCase {
  name: string;
  bytes: Buffer;
  /** Half-close after writing (the truncated cases: the server must not wait for more). */
  endAfterWrite: boolean;
  /** Reset the connection after writing (a sender gone mid-body). */
  resetAfterWrite?: boolean;
  method: string;
  /** Set when the body carries a valid signature for this source: a row may be stored. */
  signedFor?: { source: FuzzSourceName; bodySha256: string };
  /** For hand-written signed cases: the only answers the contract allows. */
  allowed?: number[];
}

export interface RequestSpec {
  name: string;
  method?: string;
  target?: string;
  version?: string;
  /** Header lines in order; duplicates allowed. `host` and `connection` are added unless present. */
  headers?: [string, string][];
  body?: Buffer | string;
  framing?: Framing;
  /** Replaces everything: the bytes are written as given. */
  raw?: Buffer;
  signedFor?: FuzzSourceName;
  allowed?: number[];
}

export type Signer = (source: FuzzSourceName, body: Buffer) => Record<string, string>;

/** Signs like each sender would (the generic source independently of the receiver's code). */
export function makeSigner(sources: ReadonlyMap<string, ResolvedSource>, url: string): Signer {
  return (name, body) => {
    if (name === 'shop') {
      const { 'x-signature': sig } = signShop(body);
      return { 'x-signature': sig as string };
    }
    const s = sources.get(name)!;
    return s.provider.sign(body, s.secrets[0]!.reveal(), Date.now(), s, `${url}/webhooks/${name}`).headers;
  };
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

export function encode(spec: RequestSpec, sign: Signer): FuzzCase {
  const method = spec.method ?? 'POST';
  // A raw case is complete as written; the empty one is half-closed (else it is just an idle connection).
  if (spec.raw !== undefined) return { name: spec.name, bytes: spec.raw, endAfterWrite: spec.raw.length === 0, method };
  const body = typeof spec.body === 'string' ? Buffer.from(spec.body, 'latin1') : (spec.body ?? Buffer.alloc(0));
  const headers: [string, string][] = [...(spec.headers ?? [])];
  const has = (n: string) => headers.some(([k]) => k.toLowerCase() === n);
  let signedFor: FuzzCase['signedFor'];
  if (spec.signedFor !== undefined) {
    for (const [k, v] of Object.entries(sign(spec.signedFor, body))) headers.push([k, v]);
    // A request cut short never delivers what the Content-Length promised: it must not be stored.
    if (spec.framing !== 'truncated' && spec.framing !== 'reset') signedFor = { source: spec.signedFor, bodySha256: sha256(body) };
  }
  if (!has('host')) headers.unshift(['Host', '127.0.0.1']);
  // Connection: close lets the client see the end of the answer without parsing it.
  if (!has('connection')) headers.push(['Connection', 'close']);
  const framing = spec.framing ?? 'length';
  let payload = body;
  if (framing === 'length') headers.push(['Content-Length', String(body.length)]);
  else if (framing === 'short-length') headers.push(['Content-Length', String(Math.max(0, body.length - 3))]);
  else if (framing === 'truncated' || framing === 'reset') {
    headers.push(['Content-Length', String(body.length + 100)]);
  } else if (framing === 'chunked') {
    headers.push(['Transfer-Encoding', 'chunked']);
    const chunks: Buffer[] = [];
    for (let i = 0; i < body.length; i += 4096) {
      const part = body.subarray(i, i + 4096);
      chunks.push(Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n'));
    }
    chunks.push(Buffer.from('0\r\n\r\n'));
    payload = Buffer.concat(chunks);
  } else if (framing === 'none') payload = Buffer.alloc(0);
  const head = `${method} ${spec.target ?? '/webhooks/shop'} ${spec.version ?? 'HTTP/1.1'}\r\n${headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return {
    name: spec.name,
    bytes: Buffer.concat([Buffer.from(head, 'latin1'), payload]),
    endAfterWrite: framing === 'truncated',
    ...(framing === 'reset' ? { resetAfterWrite: true } : {}),
    method,
    ...(signedFor === undefined ? {} : { signedFor }),
    ...(spec.allowed === undefined ? {} : { allowed: spec.allowed }),
  };
}

export const METHODS = [
  'GET',
  'HEAD',
  'POST',
  'PUT',
  'DELETE',
  'PATCH',
  'OPTIONS',
  'TRACE',
  'CONNECT',
  'PROPFIND',
  'MKCOL',
  'LOCK',
  'SEARCH',
  'QUERY',
  'PURGE',
  'M-SEARCH',
  'FOO',
  'post',
  'P0ST',
  'GET\tX',
];

/** Odd `:source` values: encoded slashes, dots, case, prototype names, broken escapes, very long. */
export const ODD_TARGETS = [
  '/webhooks/shop/',
  '/webhooks/',
  '/webhooks',
  '/webhooks//shop',
  '/webhooks/shop?x=1&x=2',
  '/webhooks/shop#frag',
  '/WEBHOOKS/shop',
  '/webhooks/SHOP',
  '/webhooks/sh%6Fp',
  '/webhooks/shop%2F..%2Fstripe',
  '/webhooks/%2e%2e',
  '/webhooks/..',
  '/webhooks/.',
  '/webhooks/../webhooks/shop',
  '/webhooks/shop/..',
  '/webhooks/%2F',
  '/webhooks/a%2Fb',
  '/webhooks/%',
  '/webhooks/%ZZ',
  '/webhooks/%E0%A4%A',
  '/webhooks/%00',
  '/webhooks/shop%00',
  '/webhooks/shop%20',
  '/webhooks/%F0%9F%92%A9',
  '/webhooks/__proto__',
  '/webhooks/constructor',
  '/webhooks/toString',
  '/webhooks/hasOwnProperty',
  '/webhooks/valueOf',
  '/webhooks/shop;x=1',
  '/webhooks/shop\\',
  '/webhooks/\u00ff\u00fe',
  `/webhooks/${'a'.repeat(2000)}`,
  `/webhooks/${'%2e'.repeat(2000)}`,
  `/webhooks/${'x'.repeat(70_000)}`,
  '*',
  'http://127.0.0.1/webhooks/shop',
  'http://evil.example/webhooks/shop',
  '//webhooks/shop',
  'webhooks/shop',
  '/healthz',
  '/metrics',
  '/',
  '/../../etc/passwd',
];

/** A JSON text nested `depth` levels deep (arrays or objects), not closed when `open`. */
export function nested(depth: number, kind: 'array' | 'object', open = false): string {
  const [l, r] = kind === 'array' ? ['[', ']'] : ['{"a":', '}'];
  return l.repeat(depth) + (kind === 'array' ? '1' : '1') + (open ? '' : r.repeat(depth));
}

const INVALID_UTF8 = [
  Buffer.from([0xff, 0xfe, 0xfd]),
  Buffer.from([0xc0, 0xaf]), // overlong "/"
  Buffer.from([0xed, 0xa0, 0x80]), // a lone surrogate
  Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]),
  Buffer.concat([Buffer.from('{"id":"'), Buffer.from([0xe2, 0x28, 0xa1]), Buffer.from('","type":"x"}')]),
];

/** The hand-written corpus. `maxBodyBytes` is the fuzz server's limit. */
export function corpus(sign: Signer, maxBodyBytes: number): FuzzCase[] {
  const json = '{"id":"corpus","type":"order.paid"}';
  const specs: RequestSpec[] = [];
  // Every method, to a real source and to an unknown one.
  for (const method of METHODS) {
    specs.push({ name: `method ${method}`, method, body: json });
    specs.push({ name: `method ${method} unknown source`, method, target: '/webhooks/nope', body: json });
  }
  for (const target of ODD_TARGETS) specs.push({ name: `target ${target.slice(0, 40)}`, target, body: json, headers: [['X-Signature', '00']] });
  // Missing, empty, duplicated, huge and absurd signature headers.
  const sigHeaders: [string, string][][] = [
    [],
    [['X-Signature', '']],
    [['X-Signature', ' ']],
    [
      ['X-Signature', '00'],
      ['X-Signature', '11'],
    ],
    [
      ['X-Signature', signShop(json)['x-signature']!],
      ['X-Signature', signShop(json)['x-signature']!],
    ],
    [['X-Signature', 'a'.repeat(15_000)]],
    [['X-Signature', 'z'.repeat(15_000)]],
    [['X-Signature', 'f'.repeat(64 * 1024)]],
    [['X-Signature', 'ab'.repeat(4000)]],
    [['X-Signature', '\u00ff\u00fe\u0080']],
    [['X-Signature', 'sha256=' + '0'.repeat(64)]],
    Array.from({ length: 500 }, (_, i) => ['X-Signature', i.toString(16).padStart(64, '0')] as [string, string]),
    Array.from({ length: 3000 }, (_, i) => [`X-Junk-${i}`, 'x'] as [string, string]),
  ];
  for (const [i, headers] of sigHeaders.entries()) specs.push({ name: `signature headers #${i}`, body: json, headers });
  const stripeSigs = [
    't=' + '9'.repeat(5000) + ',v1=' + '0'.repeat(64),
    't=1,' + Array.from({ length: 2000 }, () => 'v1=' + '0'.repeat(64)).join(','),
    't=,v1=',
    ',,,,',
    '=',
    't=1',
    'v1=00',
    `t=${Math.floor(Date.now() / 1000)},v1=zz`,
    't=-1,v1=00',
    't=1e10,v1=00',
    't=0x10,v1=00',
    `t=${'1'.repeat(12)},v1=00`,
    't=1,t=2,v1=00',
    'v0=00,t=1',
    '\u00ff=\u00fe',
  ];
  for (const s of stripeSigs)
    specs.push({
      name: `stripe-signature ${s.slice(0, 30)}`,
      target: '/webhooks/stripe',
      body: '{"id":"evt_1","type":"x"}',
      headers: [['Stripe-Signature', s]],
    });
  const now = String(Math.floor(Date.now() / 1000));
  const swSigs: [string, string][][] = [
    [
      ['webhook-id', 'x'.repeat(10_000)],
      ['webhook-timestamp', now],
      ['webhook-signature', 'v1,AAAA'],
    ],
    [
      ['webhook-id', 'msg'],
      ['webhook-timestamp', now],
      ['webhook-signature', Array.from({ length: 3000 }, () => 'v1,AAAA').join(' ')],
    ],
    [
      ['webhook-id', 'msg'],
      ['webhook-timestamp', now],
      ['webhook-signature', 'v1,' + '='.repeat(5000)],
    ],
    [
      ['webhook-id', 'msg'],
      ['webhook-timestamp', '99999999999999999999'],
      ['webhook-signature', 'v1,AAAA'],
    ],
    [
      ['webhook-id', 'msg'],
      ['webhook-timestamp', now],
      ['webhook-signature', 'v1a,AAAA v2,BBBB ,,, v1,'],
    ],
    [
      ['svix-id', 'msg'],
      ['webhook-id', 'other'],
      ['svix-timestamp', now],
      ['svix-signature', 'v1,AAAA'],
    ],
    [
      ['webhook-id', ''],
      ['webhook-timestamp', ''],
      ['webhook-signature', ''],
    ],
  ];
  for (const [i, headers] of swSigs.entries()) specs.push({ name: `standard-webhooks #${i}`, target: '/webhooks/sw', body: '{"type":"x"}', headers });
  const ghSigs = ['sha256=', 'sha256=' + 'g'.repeat(64), 'sha1=' + '0'.repeat(40), 'SHA256=' + '0'.repeat(64), 'sha256=' + '0'.repeat(10_000)];
  for (const s of ghSigs)
    specs.push({
      name: `github ${s.slice(0, 20)}`,
      target: '/webhooks/gh',
      body: '{}',
      headers: [
        ['X-Hub-Signature-256', s],
        ['X-GitHub-Delivery', 'g1'],
      ],
    });

  // Bodies: empty, binary, invalid UTF-8, truncated, deeply nested, too large; unsigned.
  const bodies: [string, Buffer | string][] = [
    ['empty', ''],
    ['binary', Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256))],
    ['nul bytes', Buffer.alloc(1000)],
    ['bom json', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(json)])],
    ['truncated json', '{"id":"x","type":'],
    ['nested arrays', nested(20_000, 'array')],
    ['nested objects', nested(8_000, 'object')],
    ['nested open', nested(20_000, 'array', true)],
    ['proto keys', '{"__proto__":{"id":"p"},"constructor":{"prototype":{"x":1}},"id":{"toString":1}}'],
    ['huge number', '{"id":1e999,"type":-0}'],
    ['duplicate keys', '{"id":"a","id":"b"}'],
    ['at the limit', Buffer.alloc(maxBodyBytes, 0x20)],
    ['one over the limit', Buffer.alloc(maxBodyBytes + 1, 0x20)],
    ['ten times the limit', Buffer.alloc(maxBodyBytes * 10, 0x41)],
    ...INVALID_UTF8.map((b, i) => [`invalid utf-8 #${i}`, b] as [string, Buffer]),
  ];
  for (const [name, body] of bodies) {
    for (const framing of ['length', 'chunked', 'truncated', 'short-length', 'reset'] as Framing[]) {
      specs.push({ name: `body ${name} (${framing})`, body, framing, headers: [['X-Signature', '00']] });
    }
  }
  // The same nasty bodies, validly signed: past verification they may only be 202 or 400 (or 413).
  const signedAllowed = [202, 400, 413];
  for (const [name, body] of bodies) {
    for (const source of SOURCE_NAMES) {
      specs.push({ name: `signed ${source} body ${name}`, target: `/webhooks/${source}`, body, signedFor: source, allowed: signedAllowed });
    }
  }
  specs.push({ name: 'signed shop id is an object', body: '{"id":{"a":1},"type":"x"}', signedFor: 'shop', allowed: [400] });
  specs.push({ name: 'signed shop id is empty', body: '{"id":"","type":"x"}', signedFor: 'shop', allowed: [400] });
  specs.push({ name: 'signed shop id is long', body: JSON.stringify({ id: 'L'.repeat(30_000), type: 'x' }), signedFor: 'shop', allowed: [202] });
  specs.push({ name: 'signed shop id with nul', body: '{"id":"a\\u0000b","type":"x\\u0000"}', signedFor: 'shop', allowed: [202] });
  specs.push({ name: 'signed stripe array body', target: '/webhooks/stripe', body: '[]', signedFor: 'stripe', allowed: [400] });
  specs.push({ name: 'signed, then chunked', body: '{"id":"chunked-signed","type":"x"}', framing: 'chunked', signedFor: 'shop', allowed: [202] });
  // Validly signed, then the sender vanishes mid-body: nothing may be stored (the id never arrived whole).
  specs.push({ name: 'signed, reset mid-body', body: '{"id":"reset-signed","type":"x"}', framing: 'reset', signedFor: 'shop' });
  specs.push({ name: 'signed, truncated', body: '{"id":"truncated-signed","type":"x"}', framing: 'truncated', signedFor: 'shop' });

  // Framing and request-line oddities.
  const raw = (name: string, text: string | Buffer) => specs.push({ name, raw: typeof text === 'string' ? Buffer.from(text, 'latin1') : text });
  raw('content-length and chunked', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`);
  raw('two content-lengths', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc`);
  raw('negative content-length', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n`);
  raw('content-length not a number', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n`);
  raw('content-length huge', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\nConnection: close\r\n\r\nabc`);
  raw('bad chunk size', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n`);
  raw(
    'chunk extension junk',
    `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3;${'x'.repeat(10_000)}\r\nabc\r\n0\r\n\r\n`,
  );
  raw('transfer-encoding gzip', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc`);
  raw('no host', `POST /webhooks/shop HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
  raw('two hosts', `POST /webhooks/shop HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
  raw('http/1.0', `POST /webhooks/shop HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}`);
  raw('http/0.9', `GET /\r\n\r\n`);
  raw('http/2.0 line', `POST /webhooks/shop HTTP/2.0\r\nHost: x\r\n\r\n`);
  raw('http/2 preface', `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`);
  raw('tls client hello', Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03, ...Array.from({ length: 64 }, (_, i) => i)]));
  raw('garbage', Buffer.from(Array.from({ length: 2048 }, (_, i) => (i * 131) % 256)));
  raw('header without colon', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nNoColonHere\r\nContent-Length: 2\r\n\r\n{}`);
  raw('space in header name', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nX Signature: 00\r\nContent-Length: 2\r\n\r\n{}`);
  raw('obs-fold', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nX-Signature: 00\r\n  11\r\nContent-Length: 2\r\n\r\n{}`);
  raw('bare LF', `POST /webhooks/shop HTTP/1.1\nHost: x\nContent-Length: 2\nConnection: close\n\n{}`);
  raw('bare CR', `POST /webhooks/shop HTTP/1.1\rHost: x\rContent-Length: 2\r\r{}`);
  raw('nul in header', `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nX-Signature: 0\u00000\r\nContent-Length: 2\r\n\r\n{}`);
  raw('double space request line', `POST  /webhooks/shop  HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}`);
  raw(
    'pipelined valid-looking after junk',
    `POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nPOST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
  );
  raw('empty', Buffer.alloc(0));
  specs.push({
    name: 'expect 100-continue',
    body: json,
    headers: [
      ['Expect', '100-continue'],
      ['X-Signature', '00'],
    ],
  });
  specs.push({ name: 'expect junk', body: json, headers: [['Expect', 'teapot']] });
  specs.push({
    name: 'content-encoding gzip junk',
    body: json,
    headers: [
      ['Content-Encoding', 'gzip'],
      ['X-Signature', '00'],
    ],
  });
  specs.push({
    name: 'form body',
    body: 'id=x&type=y',
    headers: [
      ['Content-Type', 'application/x-www-form-urlencoded'],
      ['X-Signature', '00'],
    ],
  });
  specs.push({ name: 'multipart junk', body: '--b\r\n\r\n--b--', headers: [['Content-Type', 'multipart/form-data; boundary=' + 'b'.repeat(5000)]] });
  specs.push({ name: 'many headers', body: json, headers: Array.from({ length: 1000 }, (_, i) => [`X-H${i}`, 'v'] as [string, string]) });
  specs.push({ name: 'huge cookie', body: json, headers: [['Cookie', 'a='.padEnd(15_000, 'b')]] });
  specs.push({ name: 'header over 16 KB', body: json, headers: [['X-Big', 'b'.repeat(20_000)]] });
  return specs.map((s) => encode(s, sign));
}

// --- generated cases ---

const token = fc.stringMatching(/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,20}$/);
/** Header values: printable latin1 (no CR/LF; a broken line is the corpus's job). */
const headerValue = fc.oneof(
  fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c === 0x7f ? 0x20 : c)), maxLength: 200 }),
  fc.stringMatching(/^[0-9a-f]{0,130}$/),
  fc.stringMatching(/^[A-Za-z0-9+/=]{0,100}$/),
  fc.integer({ min: 0, max: 20_000 }).map((n) => 'a'.repeat(n)),
  fc.constantFrom('t=1,v1=00', 'sha256=00', 'v1,AAAA', '', ' ', '0', '-1', '99999999999999999999'),
);
const headerName = fc.oneof(
  fc.constantFrom(
    'X-Signature',
    'Stripe-Signature',
    'X-Hub-Signature-256',
    'X-GitHub-Delivery',
    'X-GitHub-Event',
    'X-GitHub-Hook-ID',
    'webhook-id',
    'webhook-timestamp',
    'webhook-signature',
    'svix-id',
    'Content-Type',
    'Expect',
    'Connection',
    'Authorization',
    'Cookie',
  ),
  token.filter((t) => !/^(content-length|transfer-encoding|host)$/i.test(t)),
);
const bodyArb = fc.oneof(
  fc.uint8Array({ maxLength: 2048 }).map((a) => Buffer.from(a)),
  fc.jsonValue({ maxDepth: 6 }).map((v) => Buffer.from(JSON.stringify(v) ?? '')),
  fc
    .record({ id: fc.oneof(fc.string(), fc.integer(), fc.constant(null), fc.object()), type: fc.string() }, { requiredKeys: [] })
    .map((v) => Buffer.from(JSON.stringify(v))),
  fc.string({ unit: 'binary', maxLength: 500 }).map((s) => Buffer.from(s)),
  fc
    .tuple(fc.integer({ min: 1, max: 5000 }), fc.constantFrom<'array' | 'object'>('array', 'object'), fc.boolean())
    .map(([d, k, open]) => Buffer.from(nested(d, k, open))),
  fc.constant(Buffer.alloc(0)),
);
const targetArb = fc.oneof(
  fc.constantFrom(...SOURCE_NAMES.map((s) => `/webhooks/${s}`)),
  fc.constantFrom(...ODD_TARGETS.filter((t) => t.length < 3000)),
  fc.string({ maxLength: 60 }).map((s) => `/webhooks/${encodeURIComponent(s)}`),
  fc.stringMatching(/^[A-Za-z0-9%._~!$&'()*+,;=:@/-]{0,80}$/).map((s) => `/webhooks/${s}`),
);

export function caseArbitrary(sign: Signer, maxBodyBytes: number): fc.Arbitrary<FuzzCase> {
  return fc
    .record({
      method: fc.oneof({ weight: 6, arbitrary: fc.constant('POST') }, { weight: 3, arbitrary: fc.constantFrom(...METHODS) }, { weight: 1, arbitrary: token }),
      target: targetArb,
      headers: fc.array(fc.tuple(headerName, headerValue), { maxLength: 8 }),
      body: fc.oneof(
        { weight: 9, arbitrary: bodyArb },
        { weight: 1, arbitrary: fc.integer({ min: maxBodyBytes - 10, max: maxBodyBytes * 2 }).map((n) => Buffer.alloc(n, 0x7b)) },
      ),
      framing: fc.constantFrom<Framing>('length', 'length', 'length', 'none', 'chunked', 'short-length', 'truncated', 'reset'),
      // Now and then a valid signature over the random body: it may be stored, and must not 5xx.
      signedFor: fc.option(fc.constantFrom(...SOURCE_NAMES), { freq: 5 }),
    })
    .map((r) =>
      encode(
        {
          name: `generated ${r.method} ${r.target.slice(0, 40)} (${r.framing}${r.signedFor === null ? '' : `, signed for ${r.signedFor}`})`,
          method: r.method,
          target: r.signedFor === null ? r.target : `/webhooks/${r.signedFor}`,
          headers: r.headers,
          body: r.body,
          framing: r.signedFor === null ? r.framing : 'length',
          ...(r.signedFor === null ? {} : { signedFor: r.signedFor }),
        },
        sign,
      ),
    );
}
