import type { Secret } from '../config/secret.js';
import type { SourceConfig } from '../config/schema.js';

/**
 * Glossary (providers)
 * - delivery: one HTTP POST from a sender. Retries and redeliveries are new deliveries
 *   of the same event and carry the same delivery id.
 * - delivery id: what the sender keeps stable across retries and manual redelivery;
 *   never the signature or the timestamp. Falls back to `sha256:<hex of raw body>`.
 * - event type: the sender's name for what happened (`invoice.paid`, `push`).
 */

/** One incoming request, as a provider sees it. */
export interface Delivery {
  /** The exact bytes received. Verify over these, never over a re-serialisation. */
  readonly raw: Buffer;
  /** Lower-cased header names. */
  readonly headers: Readonly<Record<string, string>>;
  /** The URL as the receiver saw it (path and query on the request's Host). */
  readonly url: string;
  /** Milliseconds since the epoch, injected so tolerances are testable. */
  readonly now: number;
}

/** A configured source with its secrets resolved. */
export interface ResolvedSource {
  readonly name: string;
  readonly provider: Provider;
  readonly options: SourceConfig;
  /** Every configured secret; all are tried, for rotation. */
  readonly secrets: readonly Secret[];
  /** Secrets by key id, for senders that name theirs (MailWebhook's kid). */
  readonly keys: ReadonlyMap<string, Secret>;
  readonly successStatus: number;
  readonly retryHorizonHours: number;
  /** The same body under a new delivery id within the retry horizon is a duplicate (see Provider.unsignedDeliveryId). */
  readonly dedupeByBody: boolean;
}

export interface Identity {
  deliveryId: string;
  eventType: string;
  /** Further ids worth keeping beside the delivery id (Shopify's event id). */
  extra?: Record<string, string>;
  /**
   * What decides duplicate (same) against conflict (different) for one delivery id.
   * Default: SHA-256 of the raw body. Senders whose honest redeliveries differ in known
   * fields (Paddle's notification_id, Mailgun's signature block, Stripe's
   * pending_webhooks) hash the body without them, so a redelivery is not answered 409.
   */
  contentHash?: string;
}

/** An answer a sender demands before it will deliver (Slack's url_verification). */
export interface Handshake {
  status: number;
  contentType: string;
  body: string;
}

/**
 * Source fields that only some providers read. Each provider lists the ones it reads; any
 * other set on its source is a configuration error, never silently ignored (a
 * `timestampHeader` on a provider that never checks one would promise a freshness check
 * that does not happen).
 */
export const PROVIDER_FIELDS = [
  'keys',
  'toleranceSeconds',
  'header',
  'prefix',
  'encoding',
  'timestampHeader',
  'signedPayload',
  'deliveryId',
  'eventType',
  'secretEncoding',
  'publicUrl',
] as const;
export type ProviderField = (typeof PROVIDER_FIELDS)[number];

/**
 * Where a delivery names its event type, for `send-test --type`: a header, a field of a
 * JSON body (its path), or both (the sender writes both; identify reads the header first).
 */
export interface EventTypePlace {
  header?: string;
  body?: readonly string[];
}

/** A stored form of a delivery id as its sender shows it: that id with our prefix, or any id ending in `suffix`. */
export type StoredIdForm = { exact: string } | { suffix: string };

export interface Provider {
  readonly name: string;
  /**
   * For a sender whose stored delivery id adds to the id it shows (GitHub's hook id,
   * Mailgun's `message:`): `shown` is the sender's id in a stored one; `storedForms`, the
   * stored forms an id the sender shows may have (besides that id itself). Absent: the
   * stored id is the sender's.
   */
  readonly senderIds?: {
    shown(stored: string): string;
    storedForms(shown: string): StoredIdForm[];
  };
  /**
   * Headers (lower-cased) that carry this sender's signature or secret: never stored,
   * logged or shown (the redaction list is built from every provider's, in registry.ts).
   */
  readonly signatureHeaders: readonly string[];
  /** How long the sender may keep retrying one delivery. Purge must not forget younger keys. */
  readonly retryHorizonHours: number;
  /** Success code the sender documents (200 for senders that count only 200). */
  readonly successStatus: number;
  /**
   * True when a delivery's id can change while its signed bytes stay the same: the id comes
   * from a header the signature does not cover (GitHub's X-GitHub-Delivery, Shopify's
   * X-Shopify-Webhook-Id). A captured delivery replayed under a fresh id would then be a new
   * event, so such sources also dedupe by body within the retry horizon (the source's
   * `dedupeByBody`, whose default this is). False where the id is signed, read from the
   * signed body, or is the body's hash.
   */
  readonly unsignedDeliveryId: boolean | ((options: SourceConfig) => boolean);
  /** Does this provider need a secret? Only `none` does not. */
  readonly needsSecret: boolean;
  /** The provider-specific source fields this provider reads (see PROVIDER_FIELDS). */
  readonly fields: readonly ProviderField[];
  /** Extra configuration checks; returns problems as `field: message` strings. */
  validate?(options: SourceConfig): string[];
  /**
   * Why a resolved secret gives no usable key, or undefined when it does. Checked when the
   * configuration is loaded. Without it, a secret's key is its UTF-8 bytes, and any
   * secret that is not blank will do.
   */
  keyProblem?(secret: string, options: SourceConfig): string | undefined;
  /** Throws a `verification` ReceiverError unless one secret verifies the raw bytes. */
  verify(delivery: Delivery, source: ResolvedSource): void;
  /** Throws a `payload` ReceiverError when the id must be present and is not. */
  identify(delivery: Delivery, source: ResolvedSource): Identity;
  /** Runs after verify; a non-undefined answer is sent instead of storing an event. */
  handshake?(delivery: Delivery, source: ResolvedSource): Handshake | undefined;
  /** Signs a body as the sender would: the headers to send (for send-test and tests). */
  sign(body: Buffer, secret: string, now: number, source: ResolvedSource, url: string): SignedRequest;
  /** A realistic sample delivery body for `receiver send-test`. */
  sample(now: number): Buffer;
  /** Where identify reads the event type (see EventTypePlace); absent when no one place names it. */
  eventTypeAt?(options: SourceConfig): EventTypePlace | undefined;
}

export interface SignedRequest {
  headers: Record<string, string>;
  /** Some senders put the signature in the body (Mailgun); then this replaces it. */
  body?: Buffer;
}
