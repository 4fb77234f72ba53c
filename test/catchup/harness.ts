import Database from 'better-sqlite3';
import { runCatchUp, type CatchUpRunOptions } from '../../src/catchup/run.js';
import { makeConfig, startApp, type RunningApp } from '../helpers.js';

/** The real app on a temp SQLite file, with one source, and catch-up runs against it. */
export async function catchUpApp(dir: string, name: string, source: Record<string, unknown>, env: NodeJS.ProcessEnv) {
  const app: RunningApp = await startApp(makeConfig({ sources: { [name]: source } }, dir, env));
  const db = new Database(app.config.database, { readonly: true });
  const waits: number[] = [];
  return {
    app,
    waits,
    url: `${app.url}/webhooks/${name}`,
    stored: () => db.prepare(`SELECT delivery_id FROM events ORDER BY id`).pluck().all() as string[],
    run: (extra: Partial<CatchUpRunOptions> = {}) =>
      runCatchUp({
        settings: app.config.catchUp.get(name)!,
        source: app.config.sources.get(name)!,
        store: app.store,
        routes: app.config.routes,
        now: Date.now(),
        sleep: async (ms) => void waits.push(ms),
        ...extra,
      }),
    close: async () => {
      db.close();
      await app.close();
    },
  };
}
