import { githubCatchUp } from './github.js';
import { gitlabCatchUp } from './gitlab.js';
import { paddleCatchUp } from './paddle.js';
import { stripeCatchUp } from './stripe.js';
import type { CatchUpSender } from './types.js';

/**
 * Senders whose API can recover what they gave up on, by provider. The others have no
 * such API, or only one the sender itself may call (docs/operations.md: "Catch up after downtime").
 */
export const catchUpSenders: ReadonlyMap<string, CatchUpSender> = new Map(
  [stripeCatchUp, githubCatchUp, paddleCatchUp, gitlabCatchUp].map((s) => [s.provider, s]),
);
