import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import { ReceiverError } from '../errors.js';

export interface RawRequest {
  raw: Buffer;
  headers: Record<string, string>;
  url: string;
}

const tooLarge = (max: number) => new ReceiverError('too_large', `body is larger than maxBodyBytes (${max})`);

/** Node's server cut the request off at requestTimeout (and answered 408 itself). */
function timedOut(incoming: IncomingMessage): boolean {
  return (incoming.socket?.errored as NodeJS.ErrnoException | null | undefined)?.code === 'ERR_HTTP_REQUEST_TIMEOUT';
}

/** Reads a Node request body into one Buffer, refusing it as soon as it passes `max`. */
function readIncoming(incoming: IncomingMessage, max: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        cleanup();
        // Stop buffering; the adapter drains or closes the rest after we answer 413.
        reject(tooLarge(max));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
    };
    const onError = (e: Error) => {
      cleanup();
      reject(
        timedOut(incoming)
          ? new ReceiverError('timeout', 'the request was not complete within requestTimeoutSeconds; the server closed the connection')
          : new ReceiverError('payload', `request body could not be read: ${e.message}`),
      );
    };
    const cleanup = () => {
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onError);
      incoming.off('aborted', onAborted);
    };
    const onAborted = () => onError(new Error('client aborted'));
    incoming.on('data', onData);
    incoming.on('end', onEnd);
    incoming.on('error', onError);
    incoming.on('aborted', onAborted);
  });
}

/**
 * The exact raw bytes and the headers of a request, with the body limit applied before
 * anything else looks at the body. A Content-Length over the limit is refused unread.
 */
export async function readRawRequest(c: Context, max: number): Promise<RawRequest> {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (incoming !== undefined) {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(incoming.headers)) {
      if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
    }
    const length = Number(headers['content-length'] ?? '0');
    if (length > max) throw tooLarge(max);
    const raw = await readIncoming(incoming, max);
    return { raw, headers, url: `http://${headers.host ?? 'localhost'}${incoming.url ?? '/'}` };
  }
  // Without a socket (app.request in tests): the Fetch API request.
  const headers: Record<string, string> = {};
  c.req.raw.headers.forEach((v, k) => (headers[k] = v));
  if (Number(headers['content-length'] ?? '0') > max) throw tooLarge(max);
  const raw = Buffer.from(await c.req.arrayBuffer());
  if (raw.length > max) throw tooLarge(max);
  return { raw, headers, url: c.req.url };
}
