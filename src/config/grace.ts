import type { Config } from './load.js';

/**
 * Routes whose effect may run longer than a stop waits for it: on SIGTERM serve lets the
 * running effect finish within `shutdownGraceSeconds`, then stops it; the unit runs again
 * after the restart, so a longer effect is cut and repeated. Said by check-config and by
 * serve at start, one warning per route.
 */
export function effectsLongerThanGrace(config: Pick<Config, 'routes' | 'shutdownGraceSeconds'>): { fields: Record<string, unknown>; message: string }[] {
  const grace = config.shutdownGraceSeconds;
  return config.routes
    .filter((route) => route.effect.timeoutSeconds > grace)
    .map((route) => ({
      fields: { route: route.name, timeoutSeconds: route.effect.timeoutSeconds, shutdownGraceSeconds: grace },
      message: `route "${route.name}": its effect may run for up to ${route.effect.timeoutSeconds} s (effect.timeoutSeconds), longer than shutdownGraceSeconds (${grace} s): a stop or restart cuts it after ${grace} s and it runs again after the restart. Raise shutdownGraceSeconds to ${route.effect.timeoutSeconds} (and the systemd unit's TimeoutStopSec above it), or lower effect.timeoutSeconds`,
    }));
}
