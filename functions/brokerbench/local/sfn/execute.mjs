// Executes an ASL definition with aws-local-stepfunctions. Every Task state is handed to the
// brokerbench bridge over HTTP (127.0.0.1), which runs the same handler modules Lambda runs.
// stdin: {definition, input, bridge, context, time_scale?}; stdout (last line): {status, output | error, cause,
// waits}.
import http from 'node:http';
import { StateMachine } from 'aws-local-stepfunctions';

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

function taskResources(states, found = {}) {
  for (const [name, state] of Object.entries(states)) {
    if (state.Type === 'Task') found[name] = state.Resource;
    if (state.Type === 'Map') taskResources((state.ItemProcessor ?? state.Iterator).States, found);
    if (state.Type === 'Parallel') state.Branches.forEach((branch) => taskResources(branch.States, found));
  }
  return found;
}

// node:http rather than fetch: fetch gives up on a response after 300 s, and a cell can take longer.
function post(url, body) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const request = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': data.length } }, (response) => {
      const chunks = [];
      response.on('data', (chunk) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
    });
    request.on('error', reject);
    request.end(data);
  });
}

const job = await readStdin();

// time_scale (tests): every wait the interpreter makes (a Wait state, a Retry's interval and backoff, a task's
// TimeoutSeconds) lasts that fraction of what the definition asks, so the definition's own retry policy runs for
// real in seconds; `waits` lists what it asked for (ms), in order.
const waits = [];
if (job.time_scale !== undefined && job.time_scale !== 1) {
  const nativeSetTimeout = globalThis.setTimeout;
  globalThis.setTimeout = (callback, ms = 0, ...args) => {
    waits.push(ms);
    return nativeSetTimeout(callback, ms * job.time_scale, ...args);
  };
}
const handlers = {};
for (const [state, resource] of Object.entries(taskResources(job.definition.States))) {
  handlers[state] = async (input) => {
    const { status, body } = await post(`${job.bridge}/invoke`, { state, resource, input });
    if (status !== 200) {
      const error = new Error(body.errorMessage ?? 'task failed');
      error.name = body.errorType ?? 'States.TaskFailed';
      throw error;
    }
    return body;
  };
}

const machine = new StateMachine(job.definition, { validationOptions: { checkPaths: true, checkArn: true } });
const execution = machine.run(job.input, { overrides: { taskResourceLocalHandlers: handlers }, context: job.context });
let outcome;
try {
  outcome = { status: 'SUCCEEDED', output: await execution.result };
} catch (error) {
  const cause = error.cause ?? error;
  outcome = { status: 'FAILED', error: cause.name ?? 'Error', cause: cause.message ?? String(cause) };
}
process.stdout.write(`${JSON.stringify({ ...outcome, waits })}\n`);
