import type { Command } from 'commander';
import { ReceiverError } from '../errors.js';
import { addCommonOptions, configFrom, type CommonOptions } from './common.js';
import { ExitCode, type CliIo } from './io.js';

interface SendTestOptions extends CommonOptions {
  url?: string;
}

/** How long send-test waits for the server's answer. */
const ANSWER_TIMEOUT_MS = 10_000;

export function registerSendTest(program: Command, io: CliIo): void {
  addCommonOptions(program.command('send-test').argument('<source>', 'a configured source name'))
    .description("sign a sample delivery with that source's secret and post it to the running server")
    .option('--url <url>', 'server base URL (default http://<host>:<port> from the configuration)')
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
  const sample = source.provider.sample(now);
  const secret = source.secrets[0]?.reveal() ?? '';
  const signed = source.provider.sign(sample, secret, now, source, source.options.publicUrl ?? url);
  const body = signed.body ?? sample;
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
      headers: { 'content-type': 'application/json', ...signed.headers },
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
