import { readFileSync, statSync } from 'node:fs';
import { Secret } from './secret.js';
import { becameServiceUser } from './service-user.js';

/** A file holding secrets that users other than its owner and group can read or change. */
export interface ExposedSecretFile {
  path: string;
  /** What it holds: the configuration field of a `file:` secret, or "the environment file". */
  what: string;
  mode: number;
  /** The command that closes it, as its owner or root types it. */
  fix: string;
  message: string;
}

/**
 * The files receiver reads secrets from whose mode lets every user on the machine read
 * (or change) them, as ssh refuses an unprotected key: every `file:` secret of the
 * configuration and the environment file (--env-file, $RECEIVER_ENV_FILE or `envFile`,
 * which the unit and contrib/receiver.sh name). Only the owner and the
 * group should: 0600 root:root is what docs/operations.md makes.
 */
export function exposedSecretFiles(config: { envFile?: string | undefined }): ExposedSecretFile[] {
  const files = new Map<string, string>();
  for (const secret of secretsIn(config)) if (secret.file !== undefined && !files.has(secret.file.path)) files.set(secret.file.path, secret.file.field);
  if (config.envFile !== undefined) files.set(config.envFile, 'the environment file');
  const exposed: ExposedSecretFile[] = [];
  for (const [path, what] of files) {
    let st;
    try {
      st = statSync(path);
    } catch {
      continue; // unreadable or gone: loading it already said so, or will
    }
    if ((st.mode & 0o006) === 0) continue;
    const mode = st.mode & 0o7777;
    const fix = fixFor(path, st);
    const others = mode & 0o002 ? 'read and changed' : 'read';
    exposed.push({
      path,
      what,
      mode,
      fix,
      message: `${what}: ${path} can be ${others} by every user on this machine (mode ${mode.toString(8).padStart(4, '0')}); only its owner and the service's group should: ${fix}`,
    });
  }
  return exposed;
}

/**
 * Read as root (serve started as root, before it becomes the service's user): root's alone,
 * so the effects, which run as the service's user, cannot read it (service-user.ts).
 * Otherwise `chmod o-rwx` when this process reads the file as its owner or through its group; when
 * it reads it only through the bits for others, taking those away would lock the service
 * out too, so the file's group becomes this process's group first (run as the service's
 * user, as contrib/receiver.sh does, it names that group).
 */
function fixFor(path: string, st: { uid: number; gid: number }): string {
  const uid = process.geteuid?.();
  const gids = process.getgroups?.() ?? [];
  if (uid === 0 || becameServiceUser()) return st.uid === 0 ? `chmod 0600 ${path}` : `chown root:root ${path} && chmod 0600 ${path}`;
  if (uid === undefined || st.uid === uid || gids.includes(st.gid)) return `chmod o-rwx ${path}`;
  return `chgrp ${groupName(process.getegid?.() ?? 0)} ${path} && chmod 0640 ${path}`;
}

function groupName(gid: number): string {
  try {
    const line = readFileSync('/etc/group', 'utf8')
      .split('\n')
      .find((l) => l.split(':')[2] === String(gid));
    if (line !== undefined) return line.split(':')[0]!;
  } catch {
    // no /etc/group: the number does as well
  }
  return String(gid);
}

/** Every Secret reachable from `value` (the configuration's maps, arrays and objects). */
function secretsIn(value: unknown, seen = new Set<unknown>()): Secret[] {
  if (value instanceof Secret) return [value];
  if (value === null || typeof value !== 'object' || seen.has(value)) return [];
  seen.add(value);
  const children = value instanceof Map ? [...value.values()] : Object.values(value);
  return children.flatMap((v) => secretsIn(v, seen));
}
