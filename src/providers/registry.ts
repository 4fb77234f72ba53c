import type { Provider } from './types.js';
import { asaas } from './asaas.js';
import { github } from './github.js';
import { gitlab } from './gitlab.js';
import { hmacSha256 } from './hmac-sha256.js';
import { lemonsqueezy } from './lemonsqueezy.js';
import { mailgun } from './mailgun.js';
import { mailwebhook } from './mailwebhook.js';
import { none } from './none.js';
import { paddle } from './paddle.js';
import { shopify } from './shopify.js';
import { slack } from './slack.js';
import { standardWebhooks } from './standard-webhooks.js';
import { stripe } from './stripe.js';
import { twilio } from './twilio.js';

/** Every provider by its `provider` config value. Add a sender here and in its own file. */
export const providers: ReadonlyMap<string, Provider> = new Map(
  [stripe, github, standardWebhooks, shopify, gitlab, slack, paddle, lemonsqueezy, mailgun, twilio, asaas, mailwebhook, hmacSha256, none].map((p) => [
    p.name,
    p,
  ]),
);

export function providerNames(): string[] {
  return [...providers.keys()].sort();
}

/** Headers any request may carry a credential in, whichever the sender. */
const CREDENTIAL_HEADERS = ['authorization', 'cookie', 'proxy-authorization'];

/**
 * Headers (lower-cased) that carry a secret or a signature: never stored, logged or shown.
 * Built from every provider's `signatureHeaders`, so a new sender brings its own.
 */
export const SENSITIVE_HEADERS: readonly string[] = [...new Set([...CREDENTIAL_HEADERS, ...[...providers.values()].flatMap((p) => p.signatureHeaders)])];
