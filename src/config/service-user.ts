import { readFileSync, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { configError } from '../errors.js';

/**
 * The service's user (`user`, `serve --user`, $RECEIVER_USER). A receiver process started
 * as root reads its configuration, environment and `file:` secrets as root, then becomes
 * this user (its groups, its group, its uid). The kernel then marks the process
 * non-dumpable (with fs.suid_dumpable 0 or 2): its /proc/<pid>/environ, mem, maps and fd
 * are root's, so the effects it starts, which run as that user, cannot read its secrets
 * there; and the secret files can stay readable by root alone.
 */

/** Whether this process became the service's user (it was started as root). */
let became: string | undefined;

interface Account {
  name: string;
  uid: number;
  gid: number;
}

/** The account named `name` in /etc/passwd (system users live there, also where NSS has more). */
function account(name: string): Account | undefined {
  let text: string;
  try {
    text = readFileSync('/etc/passwd', 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const [user, , uid, gid] = line.split(':');
    if (user === name && uid !== undefined && gid !== undefined && /^\d+$/.test(uid) && /^\d+$/.test(gid)) return { name, uid: Number(uid), gid: Number(gid) };
  }
  return undefined;
}

/**
 * Started as root with a service user: become it, for good (groups first, the uid last,
 * after which nothing can be taken back). Not root, or no user: nothing changes (serve says
 * what that leaves open: exposureWarning). A user that does not exist, or is root itself,
 * is a configuration error.
 */
export function becomeServiceUser(name: string | undefined): void {
  if (name === undefined || process.geteuid?.() !== 0) return;
  const to = account(name);
  if (to === undefined) {
    throw configError(
      `user: there is no user "${name}" on this machine (/etc/passwd)`,
      `create it (useradd --system ${name}), or set "user" to the service's user`,
    );
  }
  if (to.uid === 0) return;
  // POSIX-only calls, present wherever geteuid is (Node's types leave initgroups out).
  const posix = process as unknown as { initgroups: (user: string, group: number) => void; setgid: (id: number) => void; setuid: (id: number) => void };
  posix.initgroups(to.name, to.gid);
  posix.setgid(to.gid);
  posix.setuid(to.uid);
  became = to.name;
}

/** Whether this process was started as root and became the service's user. */
export function becameServiceUser(): boolean {
  return became !== undefined;
}

/** The user this process runs as. */
function currentUser(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.geteuid?.() ?? '?'}`;
  }
}

/**
 * Whether other processes of this user are kept out of this process's /proc entries: the
 * kernel gives the entries of a non-dumpable process to root.
 */
function procClosed(): boolean {
  try {
    return process.geteuid?.() !== 0 && statSync('/proc/self/stat').uid === 0;
  } catch {
    return false;
  }
}

/** Effects run as processes of their own (exec, and module effects' host). */
function startsEffects(config: { routes: readonly { effect: { exec?: unknown; module?: unknown } }[] }): boolean {
  return config.routes.some((r) => r.effect.exec !== undefined || r.effect.module !== undefined);
}

/** What serve's start-up says when its effects could read its secrets; undefined when they cannot. */
export interface Exposure {
  message: string;
  fix: string;
}

/**
 * For serve, after becomeServiceUser: whether its exec and module effects could read its
 * secrets (its environment and memory through /proc, or everything, as root).
 */
export function exposureWarning(config: {
  user?: string | undefined;
  routes: readonly { effect: { exec?: unknown; module?: unknown } }[];
}): Exposure | undefined {
  if (!startsEffects(config)) return undefined;
  if (process.geteuid?.() === 0) {
    return {
      message: `serve runs as root: its exec and module effects run as root and can read every secret (/proc/${process.pid}/environ, /proc/${process.pid}/mem, the secret files)`,
      fix: 'set "user" (or serve --user) to the service\'s user: serve reads its secrets as root, then becomes that user',
    };
  }
  if (procClosed()) return undefined;
  const me = currentUser();
  if (became !== undefined) {
    return {
      message: `serve became ${me} but stays dumpable (fs.suid_dumpable is 1): its exec and module effects, as ${me}, can read its secrets through /proc/${process.pid}/environ and /proc/${process.pid}/mem`,
      fix: 'sysctl -w fs.suid_dumpable=0 (and set it in /etc/sysctl.d/), then restart serve',
    };
  }
  return {
    message: `serve runs as ${me} and its exec and module effects run as ${me} too: they can read its secrets through /proc/${process.pid}/environ and /proc/${process.pid}/mem`,
    fix: `start serve as root with "user": "${config.user ?? me}" (or --user ${config.user ?? me}), as contrib/receiver.service does: it reads its secrets, then becomes that user, and its /proc is closed to its effects`,
  };
}

/** For check-config, from the configuration alone: how serve will be started is not known here. */
export function configuredExposure(config: {
  user?: string | undefined;
  routes: readonly { effect: { exec?: unknown; module?: unknown } }[];
}): Exposure | undefined {
  if (!startsEffects(config)) return undefined;
  if (config.user === undefined) {
    return {
      message:
        '"user" is not set: exec and module effects run as the user serve runs as and can read its secrets through /proc/<serve\'s pid>/environ and /proc/<pid>/mem (as root: everything)',
      fix: 'set "user" to the service\'s user and start serve as root (contrib/receiver.service does): it reads its secrets, then becomes that user, and its /proc is closed to its effects',
    };
  }
  if (suidDumpable() === 1) {
    return {
      message: `fs.suid_dumpable is 1: serve stays dumpable after becoming ${config.user}, and its exec and module effects can read its secrets through /proc/<serve's pid>/environ and /proc/<pid>/mem`,
      fix: 'sysctl -w fs.suid_dumpable=0 (and set it in /etc/sysctl.d/)',
    };
  }
  return undefined;
}

function suidDumpable(): number | undefined {
  try {
    return Number(readFileSync('/proc/sys/fs/suid_dumpable', 'utf8').trim());
  } catch {
    return undefined;
  }
}
