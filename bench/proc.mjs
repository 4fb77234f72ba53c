// What the benchmarks read of a server process they started: its port from its log, its CPU
// time and memory from /proc, and a clean stop.
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

/** One clock tick of /proc/PID/stat's CPU times, in ms. */
export const TICK_MS = 1000 / Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);

/** CPU time the process has used (every thread, user + system), ms. */
export function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * TICK_MS;
}

/** A memory figure of /proc/PID/status (VmRSS, VmHWM, ...) in MB; 0 when the process is gone. */
export function rssMb(pid, field = 'VmRSS') {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * Starts a server with its stderr (logs, the port) in a file in `logDir`: a pipe to the
 * bench would fill up whenever the bench waits for a CPU, and block the server's log
 * writes. Resolves with the child and its port once a line names it.
 */
export function startLogged(file, argv, { cwd, env = {}, logDir }) {
  const logFile = join(logDir, `server-${randomBytes(3).toString('hex')}.log`);
  const fd = openSync(logFile, 'w');
  const child = spawn(file, argv, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', fd] });
  closeSync(fd);
  return new Promise((resolve, reject) => {
    const poll = setInterval(() => {
      const m = /"port":(\d+)/.exec(readFileSync(logFile, 'utf8'));
      if (m === null) return;
      clearInterval(poll);
      child.removeAllListeners('exit');
      resolve({ child, port: Number(m[1]) });
    }, 20);
    child.on('exit', (code) => {
      clearInterval(poll);
      reject(new Error(`exited ${code}: ${readFileSync(logFile, 'utf8')}`));
    });
  });
}

/** SIGTERM, and wait for the exit. */
export async function stop(child) {
  const done = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await done;
}
