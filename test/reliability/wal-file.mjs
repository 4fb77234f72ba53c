// Child process of power-cut.test.ts: commits on a database on the power-cut file system,
// makes each commit durable with WalSync only (synchronous=NORMAL, no checkpoint of its
// own), across a checkpoint that truncates the WAL and a WAL removed by the last connection
// closing and created anew; then waits to be SIGKILLed.
import Database from 'better-sqlite3';
import { WalSync } from '../../dist/store/sqlite/wal-sync.js';

const [path, mode] = process.argv.slice(2);
const wal = new WalSync(path);
const sync = () => (mode === 'blocking' ? wal.syncBlocking() : wal.sync());
const open = () => {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('wal_autocheckpoint = 0');
  return db;
};
const a = open();
a.exec('CREATE TABLE t (x TEXT)');
a.prepare('INSERT INTO t VALUES (?)').run('in a new WAL');
await sync();
a.pragma('wal_checkpoint(TRUNCATE)');
a.prepare('INSERT INTO t VALUES (?)').run('after a checkpoint that truncated the WAL');
await sync();
// The last connection closes: SQLite checkpoints and removes the WAL; the next one creates another.
a.close();
const b = open();
b.prepare('INSERT INTO t VALUES (?)').run('in the WAL created after the last connection closed');
await sync();
process.stdout.write('synced\n');
setInterval(() => {}, 1000);
