import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { ReceiverError } from '../errors.js';
import type { ResolvedSource } from '../providers/types.js';
import { addCommonOptions, configFrom, printable, type CommonOptions } from './common.js';
import { ExitCode, type CliIo } from './io.js';

interface SendTestOptions extends CommonOptions {
  url?: string;
  type?: string;
  body?: string;
}

/** How long send-test waits for the server's answer. */
const ANSWER_TIMEOUT_MS = 10_000;

export function registerSendTest(program: Command, io: CliIo): void {
  addCommonOptions(program.command('send-test').argument('<source>', 'a configured source name'))
    .description("sign a sample delivery with that source's secret and post it to the running server")
    .option('--url <url>', 'server base URL (default http://<host>:<port> from the configuration)')
    .option('--type <type>', 'the event type the delivery names (where the provider carries it: a body field or a header)')
    .option('--body <file>', "send this file's bytes as the body, signed as the sender signs ('-': standard input)")
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
  const now = io.now();
  const given = options.body === undefined ? undefined : await readBody(options.body, io);
  const { body, headers } = testDelivery(source, { type: options.type, body: given, file: options.body }, now, url);
  // A timer that keeps the process alive: when a server drops the connection without an
  // answer, Node's fetch can leave its promise pending with nothing else to wait for, and
  // the process would exit 0 having printed nothing.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(new Error(`no answer within ${ANSWER_TIMEOUT_MS / 1000} s`)), ANSWER_TIMEOUT_MS);
  let response: Response;
  let text: string;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers,
      body: new Uint8Array(body),
      signal: abort.signal,
    });
    text = await response.text();
  } catch (e) {
    throw new ReceiverError(
      'runtime',
      `cannot reach ${url}: ${(e as Error).cause instanceof Error ? ((e as Error).cause as Error).message : (e as Error).message}`,
      {
        hint: 'start the server with `receiver serve` (or pass --url)',
      },
    );
  } finally {
    clearTimeout(timer);
  }
  io.stdout.write(`POST ${url} -> ${response.status} ${text}\n`);
  if (response.status >= 300) throw new ExitCode(1);
}

/**
 * The delivery send-test posts: the provider's sample (with `type` where the provider
 * carries it) or the given body as it is, signed with the source's first secret.
 */
export function testDelivery(
  source: ResolvedSource,
  given: { type?: string | undefined; body?: Buffer | undefined; file?: string | undefined },
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
  const headers: Record<string, string> = { 'content-type': 'application/json', ...signed.headers };
  if (given.type !== undefined) checkType(source, given.type, { raw: body, headers, url, now }, given.file);
  return { body, headers };
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
