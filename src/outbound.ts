import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';

/**
 * One bounded HTTP request to something the receiver calls (a sender's API, an http
 * effect's app, an alert's destination), which may be hostile or broken: it answers within
 * a connect timeout and a total time bound that covers the whole body, it is read up to a
 * size bound and no further, and it is abandoned at once when the caller's signal aborts
 * (shutdown). Redirects are never followed. Built on node:http rather than fetch: every
 * bound is ours to set, and a connection closed without an answer fails at once.
 */

/** How long a connection (DNS, TCP and TLS) may take, at most; never longer than the total bound. */
export const CONNECT_TIMEOUT_MS = 10_000;

export interface OutboundRequest {
  method: 'GET' | 'POST';
  url: URL;
  headers?: Record<string, string> | undefined;
  body?: Uint8Array | undefined;
  /** From the start to the body's last byte. */
  timeoutMs: number;
  /** The body is read up to this many bytes. */
  maxResponseBytes: number;
  /**
   * What a longer body does: `fail` (an OutboundError `too-large`), or `cut` (the rest is
   * not read; the response says `cut`).
   */
  tooLarge?: 'fail' | 'cut';
  /** Keep only the last this many bytes of what is read (an http effect's output tail). */
  keepTail?: number | undefined;
  /** Abandons the request at once (the receiver is shutting down). */
  signal?: AbortSignal | undefined;
  connectTimeoutMs?: number;
}

export interface OutboundResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** What was kept of the body: all of it, or its tail with keepTail. */
  body: Buffer;
  /** The body was longer than maxResponseBytes and the rest was not read (tooLarge `cut`). */
  cut: boolean;
}

export type OutboundFailure = 'connect-timeout' | 'timeout' | 'too-large' | 'aborted' | 'network';

/** Why a request failed, as a kind and a message that quotes neither the URL's query nor a header. */
export class OutboundError extends Error {
  readonly failure: OutboundFailure;
  constructor(failure: OutboundFailure, message: string) {
    super(message);
    this.name = 'OutboundError';
    this.failure = failure;
  }
}

/** The URL as messages show it: no credentials, no query (either may hold a token). */
export function describeTarget(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

export function outbound(o: OutboundRequest): Promise<OutboundResponse> {
  const where = `${o.method} ${describeTarget(o.url)}`;
  const connectMs = Math.min(o.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, o.timeoutMs);
  return new Promise<OutboundResponse>((resolve, reject) => {
    if (o.signal?.aborted === true) return reject(new OutboundError('aborted', `${where} aborted: the receiver is shutting down`));
    let settled = false;
    const chunks: Buffer[] = [];
    let kept = 0;
    let read = 0;
    const send = o.url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(o.url, {
      method: o.method,
      headers: { ...o.headers, ...(o.body === undefined ? {} : { 'content-length': String(o.body.length) }) },
      // Connections are not reused: a connection left half-read by a cut body must not carry the next request.
      agent: false,
    });
    const finish = (error: OutboundError | undefined, res?: IncomingMessage, cut = false) => {
      if (settled) return;
      settled = true;
      clearTimeout(total);
      clearTimeout(connect);
      o.signal?.removeEventListener('abort', onAbort);
      if (error !== undefined) {
        req.destroy();
        reject(error);
        return;
      }
      if (cut) req.destroy();
      const body = Buffer.concat(chunks);
      resolve({
        status: res!.statusCode ?? 0,
        headers: res!.headers,
        body: o.keepTail === undefined ? body : body.subarray(Math.max(0, body.length - o.keepTail)),
        cut,
      });
    };
    const total = setTimeout(() => finish(new OutboundError('timeout', `${where} timed out after ${seconds(o.timeoutMs)}`)), o.timeoutMs);
    const connect = setTimeout(() => finish(new OutboundError('connect-timeout', `${where}: no connection within ${seconds(connectMs)}`)), connectMs);
    const onAbort = () => finish(new OutboundError('aborted', `${where} aborted: the receiver is shutting down`));
    o.signal?.addEventListener('abort', onAbort, { once: true });
    req.on('socket', (socket) => {
      if (!socket.connecting) return clearTimeout(connect);
      socket.once(o.url.protocol === 'https:' ? 'secureConnect' : 'connect', () => clearTimeout(connect));
    });
    req.on('error', (e: NodeJS.ErrnoException) => {
      // The code, never a message that may quote the URL.
      finish(new OutboundError('network', `${where} failed: ${e.code ?? (e.message.includes('://') ? e.name : e.message)}`));
    });
    req.on('response', (res) => {
      res.on('data', (chunk: Buffer) => {
        if (settled) return;
        const room = o.maxResponseBytes - read;
        read += chunk.length;
        if (chunk.length > room) {
          if (o.tooLarge !== 'cut') {
            finish(new OutboundError('too-large', `${where} answered more than ${o.maxResponseBytes} bytes; not read further`));
            return;
          }
          keep(chunk.subarray(0, room));
          finish(undefined, res, true);
          return;
        }
        keep(chunk);
      });
      res.on('end', () => finish(undefined, res));
      res.on('error', (e: NodeJS.ErrnoException) => finish(new OutboundError('network', `${where} failed while reading the answer: ${e.code ?? e.name}`)));
      res.on('close', () => {
        if (!res.complete) finish(new OutboundError('network', `${where} failed: the connection closed before the answer ended`));
      });
    });
    req.end(o.body === undefined ? undefined : Buffer.from(o.body.buffer, o.body.byteOffset, o.body.byteLength));

    function keep(chunk: Buffer) {
      chunks.push(chunk);
      kept += chunk.length;
      if (o.keepTail === undefined) return;
      while (chunks.length > 1 && kept - chunks[0]!.length >= o.keepTail) kept -= chunks.shift()!.length;
    }
  });
}

function seconds(ms: number): string {
  return `${ms / 1000}s`;
}
