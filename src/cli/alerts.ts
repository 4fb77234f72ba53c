import type { Command } from 'commander';
import { deliver } from '../alerts/deliver.js';
import { alertMessage, configSecrets, SecretScrubber } from '../alerts/message.js';
import { configError } from '../errors.js';
import { addCommonOptions, configFrom, printable, type CommonOptions } from './common.js';
import { ExitCode, type CliIo } from './io.js';

interface AlertsTestOptions extends CommonOptions {
  to?: string;
}

export function registerAlerts(program: Command, io: CliIo): void {
  const alerts = program.command('alerts').description('alerts to a chat, a mailbox or a command ("alerts" in the configuration)');
  addCommonOptions(alerts.command('test'))
    .description('send a test alert to every destination (or one): exits 0 only when each answered 2xx or exited 0')
    .option('--to <name>', 'only this destination')
    .action((options: AlertsTestOptions) => alertsTest(options, io))
    .exitOverride();
}

/**
 * `receiver alerts test`: one `test` alert to each chosen destination, directly (nothing is
 * stored), one line per destination; exit 1 when any of them failed.
 */
export async function alertsTest(options: AlertsTestOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env);
  const settings = config.alerts;
  if (settings === undefined)
    throw configError(`${config.file}: no "alerts" section`, 'add "alerts" with at least one destination (docs/operations.md, "Alerts")');
  const chosen = options.to === undefined ? settings.destinations : settings.destinations.filter((d) => d.name === options.to);
  if (chosen.length === 0)
    throw configError(
      `--to: no alert destination named "${printable(options.to ?? '')}"`,
      `name one of ${settings.destinations.map((d) => d.name).join(', ')}`,
    );
  const now = io.now();
  const scrubber = new SecretScrubber(configSecrets(config));
  const message = alertMessage(
    { key: 'test', kind: 'test', summary: 'A test alert from receiver: alerts reach this destination.' },
    'firing',
    now,
    settings.adminUrl,
    scrubber,
  );
  let failed = 0;
  for (const d of chosen) {
    const r = await deliver(d, message, `test:${now}:${d.name}`, now, { env: io.env });
    if (r.ok) io.stdout.write(`${d.name}: ok\n`);
    else {
      failed += 1;
      io.stdout.write(`${d.name}: failed: ${r.error}\n`);
    }
  }
  if (failed > 0) {
    io.stderr.write(`Error: ${failed} of ${chosen.length} alert destination(s) did not take the test alert\n`);
    throw new ExitCode(1);
  }
}
