import { readFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Command } from 'commander';
import { ReceiverError } from '../errors.js';
import { TEST_MARK_HEADER, testMark } from '../providers/test-mark.js';
import type { ResolvedSource } from '../providers/types.js';
import { addCommonOptions, configFrom, printable, type CommonOptions } from './common.js';
import { ExitCode, type CliIo } from './io.js';

interface SendTestOptions extends CommonOptions {
  url?: string;
  type?: string;
  body?: string;
  contentType?: string;
  runEffects?: boolean;
}

/** How long send-test waits for the server's whole answer. */
const ANSWER_TIMEOUT_MS = 10_000;
/** What send-test keeps of the answer's body to print. */
const ANSWER_MAX_BYTES = 64 * 1024;

export function registerSendTest(program: Command, io: CliIo): void {
  addCommonOptions(program.command('send-test').argument('<source>', 'a configured source name'))
    .description("sign a sample delivery with that source's secret and post it to the running server")
    .option('--url <url>', 'server base URL (default http://<host>:<port> from the configuration)')
    .option('--type <type>', 'the event type the delivery names (where the provider carries it: a body field or a header)')
    .option('--body <file>', "send this file's bytes as the body, signed as the sender signs ('-': standard input)")
    .option(
      '--content-type <type>',
      "the Content-Type to send (default: what the sender sends; with --body, application/json for JSON, a form's or text's type, else application/octet-stream)",
    )
    .option('--run-effects', "let the receiver run the delivery's routes (without it, a test delivery is stored with its routes skipped)")
    .action((name: string, options: SendTestOptions) => sendTest(name, options, io));
}

/** Signs a sample delivery with the source's first secret and posts it to the running server. */
export async function sendTest(name: string, options: SendTestOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env);
  const source = config.sources.get(name);
  if (source === undefined) {
    throw new ReceiverError('usage', `no source named "${name}"`, { hint: `one of: ${[...config.sources.keys()].join(', ') || '(none configured)'}` });
  }
  const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
  const base = options.url ?? `http://${host.includes(':') ? `[${host}]` : host}:${config.port}`;
  const url = `${base.replace(/\/$/, '')}/webhooks/${encodeURIComponent(name)}`;
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new ReceiverError('usage', `--url ${printable(base)} is not a URL`, { hint: 'e.g. --url http://127.0.0.1:8080' });
  }
  if (target.protocol !== 'http:' && target.protocol !== 'https:') {
    throw new ReceiverError('usage', `--url ${printable(base)} is not an http:// or https:// URL`, { hint: 'e.g. --url http://127.0.0.1:8080' });
  }
  const now = io.now();
  const given = options.body === undefined ? undefined : await readBody(options.body, io);
  const { body, headers } = testDelivery(
    source,
    { type: options.type, body: given, file: options.body, contentType: options.contentType, runEffects: options.runEffects === true },
    now,
    url,
  );
  let answer: { status: number; text: string };
  try {
    answer = await postOnce(target, headers, body, ANSWER_TIMEOUT_MS);
  } catch (e) {
    throw new ReceiverError('runtime', `cannot reach ${url}: ${(e as Error).message}`, {
      hint: 'start the server with `receiver serve` (or pass --url)',
    });
  }
  io.stdout.write(`POST ${url} -> ${answer.status} ${answer.text}\n`);
  if (answer.status >= 300) throw new ExitCode(1);
}

/**
 * One POST with node:http, answered or failed within `timeoutMs`. Not fetch: when a server
 * closes the connection without an answer, undici's promise may never settle, and only the
 * timeout would end the wait; node:http reports "socket hang up" at once.
 */
function postOnce(url: URL, headers: Record<string, string>, body: Buffer, timeoutMs: number): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(url, { method: 'POST', headers: { ...headers, 'content-length': String(body.length) } }, (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let kept = 0;
      res.on('data', (chunk: Buffer) => {
        if (kept < ANSWER_MAX_BYTES) chunks.push(chunk.subarray(0, ANSWER_MAX_BYTES - kept));
        kept += chunk.length;
      });
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', fail);
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
    function fail(e: Error) {
      clearTimeout(timer);
      reject(e);
    }
    req.on('error', fail);
    req.end(body);
  });
}

/**
 * The delivery send-test posts: the provider's sample (with `type` where the provider
 * carries it) or the given body as it is, signed with the source's first secret.
 */
export function testDelivery(
  source: ResolvedSource,
  given: {
    type?: string | undefined;
    body?: Buffer | undefined;
    file?: string | undefined;
    contentType?: string | undefined;
    runEffects?: boolean | undefined;
  },
  now: number,
  url: string,
): { body: Buffer; headers: Record<string, string> } {
  const place = given.type === undefined ? undefined : typePlace(source, given.type);
  const unsigned = given.body ?? withBodyType(source.provider.sample(now), place?.body, given.type);
  const secret = source.secrets[0]?.reveal() ?? '';
  const signed = source.provider.sign(unsigned, secret, now, source, source.options.publicUrl ?? url);
  // A type header is not signed by any sender: it is set after signing.
  if (place?.header !== undefined) signed.headers[place.header] = given.type!;
  const body = signed.body ?? unsigned;
  const headers: Record<string, string> = { 'content-type': given.body === undefined ? 'application/json' : contentTypeOf(body), ...signed.headers };
  if (given.contentType !== undefined) headers['content-type'] = given.contentType;
  // Marked as a test over the bytes sent, with the same secret (see src/providers/test-mark.ts).
  headers[TEST_MARK_HEADER] = testMark(source.name, given.runEffects === true ? 'run-effects' : 'skip-effects', body, secret);
  if (given.type !== undefined) checkType(source, given.type, { raw: body, headers, url, now }, given.file);
  return { body, headers };
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** What a --body file is, by its bytes: JSON, a form, text, or bytes. */
function contentTypeOf(body: Buffer): string {
  let text: string;
  try {
    text = strictUtf8.decode(body);
  } catch {
    return 'application/octet-stream';
  }
  try {
    JSON.parse(text);
    return 'application/json';
  } catch {
    // not JSON
  }
  if (/^[\w.~%+*-]+=[^&\s]*(&[\w.~%+*-]+=[^&\s]*)*$/.test(text.trim())) return 'application/x-www-form-urlencoded';
  return 'text/plain; charset=utf-8';
}

/** The file's bytes (or standard input's for `-`), exactly. */
async function readBody(file: string, io: CliIo): Promise<Buffer> {
  if (file === '-') {
    if (io.stdin === undefined) throw new ReceiverError('usage', '--body -: no standard input to read', { hint: 'pass a file name instead' });
    const chunks: Buffer[] = [];
    for await (const chunk of io.stdin) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    return Buffer.concat(chunks);
  }
  try {
    return readFileSync(file);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'it is a directory' : code === 'EACCES' ? 'permission denied' : (e as Error).message;
    throw new ReceiverError('usage', `cannot read --body ${file}: ${why}`, {
      hint: 'give the path of a file holding the delivery body (or - for standard input)',
    });
  }
}

/** Where this source's deliveries name their type; a usage error when nowhere send-test can set. */
function typePlace(source: ResolvedSource, type: string) {
  const place = source.provider.eventTypeAt?.(source.options);
  if (place === undefined) {
    const generic = source.provider.fields.includes('eventType');
    throw new ReceiverError('usage', `--type ${printable(type)}: a ${source.provider.name} delivery has no one place that names its event type`, {
      hint: generic
        ? `set the source's "eventType" to one field, e.g. "{body.type}" or "{header.x-event-type}", or leave out --type`
        : 'leave out --type (with --body FILE, the delivery in the file names its own type)',
    });
  }
  return place;
}

/** The sample with its JSON body's type field set (objects on the path created); as is without one. */
function withBodyType(sample: Buffer, path: readonly string[] | undefined, type: string | undefined): Buffer {
  if (path === undefined || type === undefined) return sample;
  const body = JSON.parse(sample.toString('utf8')) as Record<string, unknown>;
  let at = body;
  for (const key of path.slice(0, -1)) {
    if (at[key] === null || typeof at[key] !== 'object') at[key] = {};
    at = at[key] as Record<string, unknown>;
  }
  at[path[path.length - 1]!] = type;
  return Buffer.from(JSON.stringify(body));
}

/**
 * What the server will read as the type must be what was asked: the provider's own
 * identify decides. A file's body is sent as it is, so its own type field must agree.
 */
function checkType(
  source: ResolvedSource,
  type: string,
  d: { raw: Buffer; headers: Record<string, string>; url: string; now: number },
  file: string | undefined,
): void {
  const headers = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k.toLowerCase(), v]));
  let found: string;
  try {
    found = source.provider.identify({ ...d, headers }, source).eventType;
  } catch {
    return; // not identifiable at all: the server's answer says why
  }
  if (found === type) return;
  const place = source.provider.eventTypeAt?.(source.options);
  const field = place?.body === undefined ? undefined : `"${place.body.join('.')}"`;
  throw new ReceiverError('usage', `--type ${printable(type)}: this ${source.provider.name} delivery would be read as type "${printable(found)}"`, {
    hint:
      file !== undefined && field !== undefined
        ? `a ${source.provider.name} delivery's type is its body's ${field} field, and --body is sent as it is: edit ${file}, or leave out --type`
        : 'leave out --type',
  });
}
