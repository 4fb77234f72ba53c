import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Command } from 'commander';
import { ReceiverError } from '../errors.js';
import type { CliIo } from './io.js';

/**
 * `receiver contrib`: the files of contrib/ (the systemd unit, the cron file, the operator
 * wrapper, example configurations) from the program itself, so a host with the single
 * executable and no clone has them too. A clone's program gives its contrib/ files as they
 * are; the single executable gives them naming itself where they name
 * `node /opt/receiver/bin/receiver.js` (see forExecutable).
 */

/** Where `contrib install` puts a file, under the root it is given (/ by default). */
const INSTALLED: readonly { name: string; path: string; mode: number }[] = [
  { name: 'receiver.service', path: 'etc/systemd/system/receiver.service', mode: 0o644 },
  { name: 'receiver.cron', path: 'etc/cron.d/receiver', mode: 0o644 },
  { name: 'receiver.sh', path: 'usr/local/bin/receiver', mode: 0o755 },
];

/** The files by name, and the program they are to name (undefined: as they are). */
interface ContribFiles {
  files: () => ReadonlyMap<string, string>;
  program: string | undefined;
}

// A clone: contrib/ two levels above dist/cli (or src/cli in tests). The single
// executable has no import.meta.url; it sets its own files (useContribFiles).
let contrib: ContribFiles = {
  files: () => {
    if (typeof import.meta.url !== 'string') return new Map();
    const dir = new URL('../../contrib/', import.meta.url);
    return new Map(
      readdirSync(dir)
        .sort()
        .map((name) => [name, readFileSync(new URL(name, dir), 'utf8')]),
    );
  },
  program: undefined,
};

/** The single executable: the contrib/ files it carries, to be given naming `program` (its own path). */
export function useContribFiles(files: Record<string, string>, program: string): void {
  contrib = { files: () => new Map(Object.entries(files)), program };
}

/** The clone's program in the files: node (any Node options) running bin/receiver.js of /opt/receiver. */
const NODE_PROGRAM = /(?:\/usr\/bin\/)?node(?: --[\w=.-]+)* (?:\/opt\/receiver\/bin\/receiver\.js|"\$RECEIVER_APP\/bin\/receiver\.js")/g;
/** A path that a unit, a crontab and sh all take as it is. */
const PLAIN_PATH = /^\/[\w./+-]+$/;

/**
 * `text` (the contrib file `name`) naming `program` where it names the clone's node and
 * bin/receiver.js. Node options go too: V8 flags would make the executable compile its
 * code again at every start. The unit's Documentation= (a file of the clone) goes. A line
 * that still runs bin/receiver.js afterwards is an error: the file would need a clone.
 */
export function forExecutable(name: string, text: string, program: string): string {
  if (!PLAIN_PATH.test(program)) {
    throw new ReceiverError('usage', `the executable's path ${JSON.stringify(program)} has characters a unit or a crontab would take apart`, {
      hint: 'install it at a path of letters, digits and / . _ - + only, e.g. /usr/local/lib/receiver/receiver',
    });
  }
  const out = text.replace(NODE_PROGRAM, program).replace(/^Documentation=file:\/\/\/opt\/receiver\/.*\n/m, '');
  const left = out.split('\n').find((line) => !line.trimStart().startsWith('#') && line.includes('bin/receiver.js'));
  if (left !== undefined) throw new ReceiverError('runtime', `contrib/${name} still runs the clone after naming ${program}: ${left.trim()}`);
  return out;
}

function file(name: string): string {
  const text = contrib.files().get(name);
  if (text === undefined) {
    throw new ReceiverError('usage', `no file ${name} in contrib/`, { hint: `receiver contrib list names them: ${[...contrib.files().keys()].join(', ')}` });
  }
  return contrib.program === undefined ? text : forExecutable(name, text, contrib.program);
}

export function registerContrib(program: Command, io: CliIo): void {
  const cmd = program.command('contrib').description('the systemd unit, cron file, operator wrapper and example configurations, from the program itself');
  cmd
    .command('list')
    .description('name the files, and where `contrib install` puts each')
    .action(() => {
      const where = new Map(INSTALLED.map((f) => [f.name, `/${f.path}`]));
      const lines = [...contrib.files().keys()].map((name) => `${name}${where.has(name) ? `  -> ${where.get(name)}` : ''}`);
      io.stdout.write(`${lines.join('\n')}\n`);
    });
  cmd
    .command('print')
    .description('write one file to stdout')
    .argument('<file>', 'its name, as `contrib list` gives it')
    .action((name: string) => void io.stdout.write(file(name)));
  cmd
    .command('install')
    .description(
      'write the unit, the cron file and the wrapper where systemd, cron and the shell look for them; an existing different file is refused without --force',
    )
    .option('--dir <root>', 'the root to write under (for a system image or a test)', '/')
    .option('--force', 'replace files that differ')
    .action((options: { dir: string; force?: boolean }) => install(resolve(options.dir), options.force === true, io));
  for (const sub of cmd.commands) sub.exitOverride();
}

/**
 * Writes each INSTALLED file under `root`: all or none. A file that is already there with
 * the same text is left alone; one with other text (the operator's edits, another version's
 * file) is refused, naming it, unless `force`. Each write is atomic (a temporary file
 * renamed over it), with the file's mode.
 */
function install(root: string, force: boolean, io: CliIo): void {
  const planned = INSTALLED.map((f) => {
    const to = join(root, f.path);
    const text = file(f.name);
    const current = existsSync(to) ? readFileSync(to, 'utf8') : undefined;
    return { ...f, to, text, state: current === undefined ? 'new' : current === text ? 'same' : 'differs' };
  });
  const differs = planned.filter((p) => p.state === 'differs');
  if (differs.length > 0 && !force) {
    throw new ReceiverError(
      'runtime',
      `${differs.map((p) => p.to).join(', ')} ${differs.length === 1 ? 'exists' : 'exist'} with other contents; nothing was written`,
      {
        hint: `compare with \`receiver contrib print ${differs[0]!.name}\`; keep your own settings in a drop-in (systemctl edit receiver) and pass --force to replace ${differs.length === 1 ? 'it' : 'them'}`,
      },
    );
  }
  const lines: string[] = [];
  for (const p of planned) {
    if (p.state === 'same') {
      lines.push(`unchanged ${p.to}`);
      continue;
    }
    const tmp = `${p.to}.receiver-${process.pid}.tmp`;
    try {
      mkdirSync(dirname(p.to), { recursive: true, mode: 0o755 });
      writeFileSync(tmp, p.text, { mode: p.mode, flag: 'wx' });
      chmodSync(tmp, p.mode); // whatever the umask
      renameSync(tmp, p.to);
    } catch (e) {
      removeQuietly(tmp);
      const code = (e as NodeJS.ErrnoException).code;
      throw new ReceiverError('runtime', `cannot write ${p.to}: ${code ?? (e as Error).message}`, {
        hint: code === 'EACCES' || code === 'EPERM' ? 'run it as root' : `check ${dirname(p.to)}`,
        cause: e,
      });
    }
    lines.push(`${p.state === 'new' ? 'wrote' : 'replaced'} ${p.to}`);
  }
  io.stdout.write(`${lines.join('\n')}\n`);
}

function removeQuietly(file: string): void {
  try {
    rmSync(file, { force: true });
  } catch {
    // Its directory is not one: there is nothing to remove.
  }
}
