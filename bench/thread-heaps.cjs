// Each thread's V8 heap, for finding where serve's memory goes. Preloaded into every thread
// of a process (node runs NODE_OPTIONS' --require in worker threads too):
//
//   THREAD_HEAPS_DIR=/tmp/heaps NODE_OPTIONS="--require $PWD/bench/thread-heaps.cjs" node bin/receiver.js serve -c ...
//
// Every half second each thread writes THREAD_HEAPS_DIR/<pid>-<thread>.json (thread: main,
// or ingest/drain told apart by their workerData, else the worker's id): V8's heap
// statistics and, per space (new, old, code, large objects ...), its size, what is used
// and what is resident, in bytes.
const { isMainThread, threadId, workerData } = process.getBuiltinModule('node:worker_threads');
const { writeFileSync } = process.getBuiltinModule('node:fs');
const v8 = process.getBuiltinModule('node:v8');

const dir = process.env.THREAD_HEAPS_DIR;
const data = workerData !== null && typeof workerData === 'object' ? workerData : {};
const thread = isMainThread ? 'main' : 'signals' in data ? 'drain' : 'busyTimeoutMs' in data ? 'ingest' : `worker${threadId}`;
if (dir !== undefined) {
  setInterval(() => {
    const spaces = Object.fromEntries(
      v8.getHeapSpaceStatistics().map((s) => [s.space_name, { size: s.space_size, used: s.space_used_size, resident: s.physical_space_size }]),
    );
    writeFileSync(`${dir}/${process.pid}-${thread}.json`, JSON.stringify({ thread, heap: v8.getHeapStatistics(), spaces }));
  }, 500).unref();
}
