import type { Provider } from './types.js';
import { github } from './github.js';
import { hmacSha256 } from './hmac-sha256.js';
import { none } from './none.js';
import { standardWebhooks } from './standard-webhooks.js';
import { stripe } from './stripe.js';

/** Every provider by its `provider` config value. Add a sender here and in its own file. */
export const providers: ReadonlyMap<string, Provider> = new Map(
  [stripe, github, standardWebhooks, hmacSha256, none].map((p) => [p.name, p]),
);

export function providerNames(): string[] {
  return [...providers.keys()].sort();
}
