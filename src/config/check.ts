import { configError } from '../errors.js';
import { processUser } from '../store/sqlite/open.js';
import type { Config } from './load.js';
import { preflight } from './preflight.js';

/**
 * The checks a loaded configuration passes before anything runs on it: `check-config`
 * makes them, and so does serve before it takes in a reloaded configuration, so a reload
 * refuses exactly what check-config refuses. Loading (loadConfig) already refused what
 * does not parse or validate, naming `file:line:column` or the field; these are the
 * problems the first event would meet (see preflight), thrown as one `config` error.
 */
export async function assertRunnable(config: Config, where: { cwd: string; env: NodeJS.ProcessEnv }): Promise<void> {
  const problems = await preflight(config, where);
  if (problems.length === 0) return;
  throw configError(
    `${config.file}: ${problems.length === 1 ? 'a problem' : `${problems.length} problems`} found (checked as ${processUser()}, nothing was run)\n${problems.join('\n')}`,
    "fix what is named above; run check-config as the service's user (contrib/receiver.sh does), whose permissions are the ones that count",
  );
}
