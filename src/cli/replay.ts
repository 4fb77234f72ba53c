import type { Command } from 'commander';
import { ReceiverError } from '../errors.js';
import { replayJson } from '../json/replay.js';
import type { ReplayRefusal, ReplayResult } from '../store/ops-types.js';
import type { Config } from '../config/load.js';
import { deliveryIdForms, nearMatchText } from '../delivery-ids.js';
import type { Store } from '../store/types.js';
import { addCommonOptions, configFrom, openStoreFor, printable, printJson, type CommonOptions } from './common.js';
import { nearMatches } from './events.js';
import type { CliIo } from './io.js';

interface ReplayOptions extends CommonOptions {
  source?: string;
  delivery?: string;
  dead?: boolean;
  route?: string;
  force?: boolean;
  json?: boolean;
}

export function registerReplay(program: Command, io: CliIo): void {
  addCommonOptions(program.command('replay').argument('[id...]', 'event ids (the "id" of the 202 answer, or from `receiver events list`)'))
    .description('put events back to pending for the running server to drain within seconds; effects already done stay skipped unless --force')
    .option('--source <source>', 'with --delivery: the event with this source and delivery id')
    .option('--delivery <delivery-id>', "with --source: the delivery id as the sender shows it (GitHub's GUID alone too)")
    .option('--dead', 'replay every dead event')
    .option('--route <name>', 'only this route of the event (its other routes stay as they are; e.g. re-send a licence without a deploy)')
    .option('--force', 're-run effects whose key is already done (e.g. re-send a licence email); recorded as forced')
    .option('--json', 'print one JSON document')
    .addHelpText('after', '\nA replayed event starts a fresh retry count (maxAttempts applies again); its earlier attempts stay in `events show`.\n')
    .action((ids: string[], options: ReplayOptions) => replay(ids, options, io));
}

type Target = { ids: number[] } | { source: string; deliveryId: string } | { dead: true };

function targetOf(ids: string[], options: ReplayOptions): Target {
  const bySource = options.source !== undefined || options.delivery !== undefined;
  const forms = [ids.length > 0, bySource, options.dead === true].filter(Boolean).length;
  if (forms !== 1) {
    throw new ReceiverError('usage', 'replay needs exactly one of: event ids, --source S --delivery D, or --dead', {
      hint: 'receiver replay 42   |   receiver replay --source stripe --delivery evt_123   |   receiver replay --dead',
    });
  }
  if (options.dead === true) {
    if (options.route !== undefined) {
      throw new ReceiverError('usage', '--route replays one route of the events named, not of every dead event', {
        hint: 'receiver replay 42 --route licence   |   receiver replay --dead',
      });
    }
    return { dead: true };
  }
  if (bySource) {
    if (options.source === undefined || options.delivery === undefined) {
      const missing = options.source === undefined ? '--source' : '--delivery';
      throw new ReceiverError('usage', `${missing} is missing: --source and --delivery go together`, {
        hint: 'receiver replay --source stripe --delivery evt_123',
      });
    }
    return { source: options.source, deliveryId: options.delivery };
  }
  return {
    ids: ids.map((id) => {
      if (!/^\d+$/.test(id) || Number(id) <= 0 || !Number.isSafeInteger(Number(id))) {
        throw new ReceiverError('usage', `"${id}" is not an event id (a positive whole number)`, {
          hint: 'find the id with `receiver events list`, or use --source S --delivery D',
        });
      }
      return Number(id);
    }),
  };
}

/** The one event with this delivery id (any stored form of it, see src/delivery-ids.ts) in `source`. */
async function eventOfDelivery(store: Store, config: Config, source: string, given: string): Promise<number> {
  const found = await store.listEvents({ source, deliveryIdForms: deliveryIdForms(config.sources, given, source), limit: 10 });
  if (found.length === 1) return found[0]!.id;
  const what = `source "${printable(source)}" with delivery id "${printable(given)}"`;
  if (found.length > 1) {
    throw new ReceiverError('usage', `${found.length} events from ${what}: ${found.map((e) => printable(nearMatchText({ ...e }))).join(', ')}`, {
      hint: `give the whole delivery id, or the event id: receiver replay ${found[0]!.id}`,
    });
  }
  throw new ReceiverError('not_found', `no event from ${what} (never received, or purged); ${await nearMatches(store, given)}`, {
    hint: `check the names with \`receiver events list --source ${source}\``,
  });
}

function explain(r: ReplayRefusal): string {
  switch (r.reason) {
    case 'not_found':
      return `event ${r.eventId} does not exist (never received, or purged)`;
    case 'processing':
      return `event ${r.eventId} is being processed right now (lease held by ${r.leaseOwner ?? 'unknown'} until ${r.leaseExpiresAt == null ? 'unknown' : new Date(r.leaseExpiresAt).toISOString()})`;
    case 'body_dropped':
      return `event ${r.eventId} has no body any more (dropped by purge --bodies-days), so its effects cannot run again`;
    case 'no_route': {
      const has = (r.routes ?? []).map((n) => `"${printable(n)}"`).join(', ');
      return `event ${r.eventId} has no route "${printable(r.route ?? '')}" (${has === '' ? 'it has no route of its own: it was done before work per route existed, or no route applied; replay it whole' : `its routes: ${has}`})`;
    }
  }
}

export async function replay(ids: string[], options: ReplayOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env, { secrets: false });
  const target = targetOf(ids, options);
  const force = options.force === true;
  const route = options.route;
  const store = await openStoreFor(config);
  let result: ReplayResult;
  try {
    const now = io.now();
    if ('dead' in target) {
      result = await store.replayDead({ force, now });
    } else if ('source' in target) {
      result = await store.replayEvents([await eventOfDelivery(store, config, target.source, target.deliveryId)], { force, now, route });
    } else {
      result = await store.replayEvents(target.ids, { force, now, route });
    }
  } finally {
    await store.close();
  }

  if (options.json === true) printJson(io.stdout, replayJson(result));
  if (result.refused.length > 0) {
    const hint = result.refused.some((r) => r.reason === 'processing')
      ? 'wait until it finishes (at most until its lease expires), then run the same command again'
      : undefined;
    throw new ReceiverError('not_found', `nothing was replayed: ${result.refused.map(explain).join('; ')}`, hint === undefined ? {} : { hint });
  }
  if (options.json === true) return;
  if (result.replayed.length === 0) {
    io.stdout.write('No dead events to replay.\n');
    return;
  }
  const lines = result.replayed.map(
    (e) =>
      `  ${e.eventId}  ${printable(e.source)}/${printable(e.deliveryId)} (was ${e.previousStatus})${e.route === undefined ? '' : `, route ${printable(e.route)} only`}`,
  );
  io.stdout.write(
    `Replayed ${result.replayed.length} event(s):\n${lines.join('\n')}\n` +
      'The running server drains them within about a second, with a fresh retry count. ' +
      (force
        ? 'Forced: effects whose key is already done run again, and the attempts are recorded as forced.\n'
        : 'Effects already done stay skipped (add --force to run them again).\n'),
  );
}
