'use strict';
/*
 * vllm.js - a mock vLLM replica: an OpenAI-compatible server whose engine has
 * automatic prefix caching with a finite, LRU-evicted block cache
 * (kvcache.js), and that spends time on the prompt tokens it did not find
 * cached, so prefix reuse shows in cached_tokens, in /metrics and in the time
 * to first token, and overload shows as queueing. Node built-ins only.
 *
 * Used in-process by tests and benchmarks (startVllmMock) and from the
 * command line:
 *   node tests/mock/vllm.js [--name NAME] [--host H] [--port N] [--model M]
 *       [--capacity-tokens N] [--block-tokens N] [--us-per-token US]
 *       [--us-per-output-token US] [--speed X] [--max-running N] [--chunk-tokens N]
 * prints "listening HOST:PORT NAME" on stdout once it accepts connections.
 *
 * Endpoints: POST /v1/chat/completions and /v1/completions (JSON, or SSE with
 * "stream": true; a last usage chunk with stream_options.include_usage),
 * GET /v1/models, GET /health, GET /metrics (Prometheus text with vLLM's
 * metric names), and the mock's own GET /__mock/stats, GET /__mock/requests
 * (the headers and hint fields of the last requests), POST /__mock/reset.
 * Every answer names the replica in the X-Mock-Replica header.
 *
 * The engine of one replica (times divided by `speed`):
 *
 *   request ─▶ [waiting, if max-running requests run] ─▶ prefill queue (FIFO)
 *        ─▶ prefill: lookup + acquire blocks, usPerToken per uncached token,
 *           one request at a time (the GPU's compute is shared)
 *        ─▶ first token ─▶ decode: usPerOutputToken per further token, every
 *           request on its own timers, chunkTokens tokens per SSE event
 *        ─▶ done: blocks released (they stay cached until evicted)
 *
 * Prefill runs on a virtual clock (each prefill starts when the previous one
 * ends, not when its timer happened to fire), so timer latency does not add
 * up under load. A request generates exactly max_completion_tokens or
 * max_tokens tokens (16 if neither is given), each the 4-byte text "tok ".
 */
const http = require('node:http');
const {performance} = require('node:perf_hooks');
const {
    DEFAULT_BLOCK_TOKENS, countTokens, renderPrompt, blockHashes, PrefixCache,
} = require('./kvcache');

const DEFAULTS = {
    name: 'vllm-0',
    model: 'mock-vllm',
    capacityTokens: 1 << 20,
    blockTokens: DEFAULT_BLOCK_TOKENS,
    usPerToken: 20, /* prefill time per uncached prompt token */
    usPerOutputToken: 1000, /* decode time per output token after the first */
    speed: 1, /* every time is divided by this */
    maxRunning: 0, /* requests admitted at once; 0: no limit */
    chunkTokens: 16, /* output tokens per stream event */
    defaultMaxTokens: 16,
    maxTokensLimit: 32768,
    recordLimit: 1000, /* requests kept for /__mock/requests */
};
const MAX_REQUEST_BODY = 64 * 1024 * 1024;
const OUTPUT_TOKEN = 'tok ';
const COMPLETION_PATHS = new Set(['/v1/chat/completions', '/v1/completions']);
/* Body fields recorded for tests of the proxy's hints (never the prompt itself). */
const RECORDED_FIELDS = ['model', 'user', 'cache_salt', 'prompt_cache_key', 'stream', 'stream_options',
    'max_tokens', 'max_completion_tokens', 'seed', 'metadata'];

/* fn after ms (at once, but asynchronously, if ms <= 0); returns a cancel function. */
function later(ms, fn) {
    if (ms <= 0) {
        const h = setImmediate(fn);
        return () => clearImmediate(h);
    }
    const h = setTimeout(fn, ms);
    return () => clearTimeout(h);
}

function readBody(req) {
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        req.on('data', (c) => {
            size += c.length;
            if (size > MAX_REQUEST_BODY)
                return reject(new Error('request body too large'));
            chunks.push(c);
        });
        req.on('end', () => resolve(Buffer.concat(chunks)));
        req.on('error', reject);
    });
}

function sendJson(res, status, obj, headers = {}) {
    const body = JSON.stringify(obj);
    res.writeHead(status, {'content-type': 'application/json', 'content-length': Buffer.byteLength(body),
        ...headers});
    res.end(body);
}

function openaiError(status, message, type = 'BadRequestError') {
    return {error: {message, type, param: null, code: status}};
}

const sse = (obj) => `data: ${typeof obj === 'string' ? obj : JSON.stringify(obj)}\n\n`;

/* The parsed, validated parts of one completion request; a string on a bad request. */
function parseCompletion(path, raw, defaults) {
    let body;
    try {
        body = JSON.parse(raw.toString('utf8'));
    } catch (e) {
        return 'request body is not valid JSON';
    }
    if (!body || typeof body !== 'object' || Array.isArray(body))
        return 'request body must be a JSON object';
    const chat = path === '/v1/chat/completions';
    if (chat && (!Array.isArray(body.messages) || body.messages.length === 0))
        return 'messages must be a non-empty array';
    if (!chat && (body.prompt === undefined || body.prompt === null))
        return 'prompt is required';
    const max = body.max_completion_tokens ?? body.max_tokens;
    if (max !== undefined && max !== null && (!Number.isInteger(max) || max < 1 || max > defaults.maxTokensLimit))
        return `max_tokens must be an integer from 1 to ${defaults.maxTokensLimit}`;
    if (body.cache_salt !== undefined && (typeof body.cache_salt !== 'string' || body.cache_salt === ''))
        return 'cache_salt must be a non-empty string';
    const prompt = Buffer.from(renderPrompt(body), 'utf8');
    return {
        body, chat, prompt,
        promptTokens: countTokens(prompt),
        maxTokens: max ?? defaults.defaultMaxTokens,
        finish: max === undefined || max === null ? 'stop' : 'length',
        stream: body.stream === true,
        includeUsage: !!(body.stream_options && body.stream_options.include_usage),
        model: typeof body.model === 'string' ? body.model : defaults.model,
    };
}

class VllmMock {
    constructor(opts = {}) {
        this.opts = {...DEFAULTS, ...opts};
        for (const k of Object.keys(DEFAULTS))
            if (this.opts[k] === undefined)
                this.opts[k] = DEFAULTS[k];
        this.name = this.opts.name;
        this.cache = new PrefixCache(Math.floor(this.opts.capacityTokens / this.opts.blockTokens),
            this.opts.blockTokens);
        this.server = http.createServer((req, res) => this._onRequest(req, res));
        this.server.keepAliveTimeout = 60000;
        this.server.headersTimeout = 120000;
        this.server.requestTimeout = 0;
        this.jobs = new Set();
        this.waiting = [];
        this.prefillQueue = [];
        this.prefillBusy = false;
        this.busyUntil = 0;
        this.running = 0;
        this.reset();
    }

    listen(port = 0, host = '127.0.0.1') {
        return new Promise((resolve, reject) => {
            this.server.once('error', reject);
            this.server.listen(port, host, () => {
                this.server.off('error', reject);
                this.port = this.server.address().port;
                this.host = host;
                this.url = `http://${host}:${this.port}`;
                resolve(this);
            });
        });
    }

    close() {
        for (const job of [...this.jobs])
            this._abort(job);
        this.server.closeAllConnections();
        return new Promise((resolve) => this.server.close(() => resolve()));
    }

    /*
     * Empty the cache and forget counters and recorded requests. Requests in
     * progress carry on (their blocks are no longer cached).
     */
    reset() {
        this.cache.clear();
        this.seq = 0;
        this.records = [];
        this.counters = {
            requests: 0, completed: 0, aborted: 0, rejected: 0,
            prompt_tokens: 0, cached_tokens: 0, completion_tokens: 0,
            finished_stop: 0, finished_length: 0, ttft_ms_sum: 0,
        };
    }

    stats() {
        return {
            name: this.name, model: this.opts.model, url: this.url,
            ...this.counters,
            running: this.running, waiting: this.waiting.length,
            hit_rate: this.counters.prompt_tokens ? this.counters.cached_tokens / this.counters.prompt_tokens : 0,
            cache: this.cache.stats(),
            config: {
                capacity_tokens: this.opts.capacityTokens, block_tokens: this.opts.blockTokens,
                us_per_token: this.opts.usPerToken, us_per_output_token: this.opts.usPerOutputToken,
                speed: this.opts.speed, max_running: this.opts.maxRunning, chunk_tokens: this.opts.chunkTokens,
            },
        };
    }

    requests() {
        return this.records;
    }

    /* Prometheus text: vLLM's names (v1 engine), one sample per line. */
    metricsText() {
        const labels = `engine="0",model_name="${this.opts.model}"`;
        const c = this.counters;
        const cs = this.cache.stats();
        const rows = [
            ['vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', '', this.running],
            ['vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', '', this.waiting.length],
            ['vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', '',
                Math.min(1, (cs.used_blocks - cs.evictable_blocks) / cs.capacity_blocks)],
            ['vllm:prefix_cache_queries', 'counter', 'Prefix cache queries, in terms of number of queried tokens.',
                '_total', c.prompt_tokens],
            ['vllm:prefix_cache_hits', 'counter', 'Prefix cache hits, in terms of number of cached tokens.',
                '_total', c.cached_tokens],
            ['vllm:prompt_tokens', 'counter', 'Number of prefill tokens processed.', '_total', c.prompt_tokens],
            ['vllm:generation_tokens', 'counter', 'Number of generation tokens processed.', '_total',
                c.completion_tokens],
        ];
        const out = [];
        for (const [name, type, help, suffix, value] of rows) {
            out.push(`# HELP ${name}${suffix} ${help}`, `# TYPE ${name}${suffix} ${type}`);
            out.push(`${name}${suffix}{${labels}} ${Number(value).toFixed(1)}`);
        }
        out.push('# HELP vllm:request_success_total Count of successfully processed requests.',
            '# TYPE vllm:request_success_total counter');
        for (const reason of ['stop', 'length'])
            out.push(`vllm:request_success_total{${labels},finished_reason="${reason}"} ` +
                `${c['finished_' + reason].toFixed(1)}`);
        out.push('# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig',
            '# TYPE vllm:cache_config_info gauge',
            `vllm:cache_config_info{block_size="${cs.block_tokens}",enable_prefix_caching="True",` +
            `engine="0",num_gpu_blocks="${cs.capacity_blocks}"} 1.0`);
        return out.join('\n') + '\n';
    }

    /* ---- HTTP ------------------------------------------------------------ */

    async _onRequest(req, res) {
        let raw;
        try {
            raw = await readBody(req);
        } catch (e) {
            res.destroy();
            return;
        }
        res.setHeader('x-mock-replica', this.name);
        const path = new URL(req.url, 'http://mock').pathname;
        if (req.method === 'GET')
            return this._get(path, res);
        if (req.method === 'POST' && path === '/__mock/reset') {
            this.reset();
            return sendJson(res, 200, {reset: true});
        }
        if (req.method === 'POST' && COMPLETION_PATHS.has(path))
            return this._complete(req, res, path, raw);
        return sendJson(res, 404, openaiError(404, `Not Found: ${req.method} ${path}`, 'NotFoundError'));
    }

    _get(path, res) {
        if (path === '/health') {
            res.writeHead(200, {'content-length': 0});
            return res.end();
        }
        if (path === '/metrics') {
            const text = this.metricsText();
            res.writeHead(200, {'content-type': 'text/plain; version=0.0.4; charset=utf-8',
                'content-length': Buffer.byteLength(text)});
            return res.end(text);
        }
        if (path === '/v1/models')
            return sendJson(res, 200, {object: 'list', data: [{id: this.opts.model, object: 'model',
                created: Math.floor(Date.now() / 1000), owned_by: 'vllm', root: this.opts.model,
                parent: null, max_model_len: 131072}]});
        if (path === '/__mock/stats')
            return sendJson(res, 200, this.stats());
        if (path === '/__mock/requests')
            return sendJson(res, 200, {name: this.name, requests: this.records});
        return sendJson(res, 404, openaiError(404, `Not Found: GET ${path}`, 'NotFoundError'));
    }

    _record(req, path, parsed) {
        const fields = {};
        if (typeof parsed === 'object')
            for (const f of RECORDED_FIELDS)
                if (parsed.body[f] !== undefined)
                    fields[f] = parsed.body[f];
        const rec = {seq: ++this.seq, replica: this.name, path, headers: {...req.headers}, fields};
        this.records.push(rec);
        if (this.records.length > this.opts.recordLimit)
            this.records.splice(0, this.records.length - this.opts.recordLimit);
        return rec;
    }

    _complete(req, res, path, raw) {
        const parsed = parseCompletion(path, raw, this.opts);
        const rec = this._record(req, path, parsed);
        this.counters.requests++;
        if (typeof parsed === 'string') {
            this.counters.rejected++;
            return sendJson(res, 400, openaiError(400, parsed));
        }
        const job = {
            ...parsed, rec, res, path, seq: rec.seq,
            id: `${parsed.chat ? 'chatcmpl' : 'cmpl'}-${this.name}-${rec.seq}`,
            created: Math.floor(Date.now() / 1000),
            hashes: blockHashes(parsed.prompt, this.opts.blockTokens, parsed.body.cache_salt || ''),
            arrived: performance.now(), state: 'new', acquired: false, cancel: null, emitted: 0,
        };
        rec.prompt_tokens = job.promptTokens;
        this.jobs.add(job);
        res.on('close', () => {
            if (job.state !== 'done')
                this._abort(job);
        });
        this._admit(job);
    }

    /* ---- engine ---------------------------------------------------------- */

    _admit(job) {
        if (this.opts.maxRunning > 0 && this.running >= this.opts.maxRunning) {
            job.state = 'waiting';
            this.waiting.push(job);
            return;
        }
        this.running++;
        job.state = 'prefill';
        job.queuedAt = performance.now();
        this.prefillQueue.push(job);
        this._pump();
    }

    /* Start the next prefill unless one is in progress. */
    _pump() {
        if (this.prefillBusy)
            return;
        let job;
        while ((job = this.prefillQueue.shift()) !== undefined && job.state !== 'prefill')
            ; /* aborted while queued */
        if (job === undefined)
            return;
        job.cached = this.cache.lookup(job.hashes, job.promptTokens);
        this.cache.acquire(job.hashes);
        job.acquired = true;
        job.rec.cached_tokens = job.cached;
        this.counters.prompt_tokens += job.promptTokens;
        this.counters.cached_tokens += job.cached;
        const ms = (job.promptTokens - job.cached) * this.opts.usPerToken / 1000 / this.opts.speed;
        const now = performance.now();
        const start = Math.max(now, job.queuedAt, this.busyUntil);
        this.busyUntil = start + ms;
        this.prefillBusy = true;
        job.prefillEnd = this.busyUntil;
        job.cancel = later(this.busyUntil - now, () => {
            this.prefillBusy = false;
            job.cancel = null;
            if (job.state === 'prefill')
                this._firstToken(job);
            this._pump();
        });
    }

    _firstToken(job) {
        job.state = 'decode';
        this.counters.ttft_ms_sum += performance.now() - job.arrived;
        job.emitted = 1;
        if (job.stream) {
            job.res.writeHead(200, {'content-type': 'text/event-stream; charset=utf-8',
                'cache-control': 'no-cache'});
            if (job.chat)
                job.res.write(sse(this._chunk(job, {role: 'assistant', content: ''})));
            job.res.write(sse(this._chunk(job, job.chat ? {content: OUTPUT_TOKEN} : OUTPUT_TOKEN)));
        }
        this._decode(job, job.prefillEnd);
    }

    /* Emit the next chunk of tokens at its due time (virtual clock from the first token). */
    _decode(job, lastDue) {
        const left = job.maxTokens - job.emitted;
        if (left <= 0)
            return this._finish(job);
        const n = Math.min(left, this.opts.chunkTokens);
        const due = lastDue + n * this.opts.usPerOutputToken / 1000 / this.opts.speed;
        job.cancel = later(due - performance.now(), () => {
            job.cancel = null;
            job.emitted += n;
            if (job.stream) {
                const text = OUTPUT_TOKEN.repeat(n);
                job.res.write(sse(this._chunk(job, job.chat ? {content: text} : text)));
            }
            this._decode(job, due);
        });
    }

    _usage(job) {
        return {
            prompt_tokens: job.promptTokens, total_tokens: job.promptTokens + job.maxTokens,
            completion_tokens: job.maxTokens,
            prompt_tokens_details: {cached_tokens: job.cached},
        };
    }

    /* One stream chunk: a chat delta object, or a completion's text. */
    _chunk(job, delta, finish = null) {
        const choice = job.chat ? {index: 0, delta, logprobs: null, finish_reason: finish}
            : {index: 0, text: delta, logprobs: null, finish_reason: finish, stop_reason: null};
        const chunk = {id: job.id, object: job.chat ? 'chat.completion.chunk' : 'text_completion',
            created: job.created, model: job.model, choices: [choice]};
        if (job.includeUsage)
            chunk.usage = null;
        return chunk;
    }

    _finish(job) {
        const usage = this._usage(job);
        if (job.stream) {
            const parts = [sse(this._chunk(job, job.chat ? {} : '', job.finish))];
            if (job.includeUsage)
                parts.push(sse({id: job.id, object: job.chat ? 'chat.completion.chunk' : 'text_completion',
                    created: job.created, model: job.model, choices: [], usage}));
            parts.push(sse('[DONE]'));
            job.res.end(parts.join(''));
        } else {
            const text = OUTPUT_TOKEN.repeat(job.maxTokens);
            const choice = job.chat
                ? {index: 0, message: {role: 'assistant', content: text, tool_calls: []}, logprobs: null,
                    finish_reason: job.finish, stop_reason: null}
                : {index: 0, text, logprobs: null, finish_reason: job.finish, stop_reason: null};
            sendJson(job.res, 200, {id: job.id, object: job.chat ? 'chat.completion' : 'text_completion',
                created: job.created, model: job.model, choices: [choice], usage});
        }
        this.counters.completed++;
        this.counters.completion_tokens += job.maxTokens;
        this.counters['finished_' + job.finish]++;
        this._done(job, 'done');
    }

    /* The client left: stop its timers and free what it holds. */
    _abort(job) {
        if (job.state === 'done')
            return;
        if (job.state === 'waiting')
            this.waiting = this.waiting.filter((j) => j !== job);
        /* A prefill in progress keeps the engine busy until its timer ends. */
        if (job.cancel && job.state !== 'prefill') {
            job.cancel();
            job.cancel = null;
        }
        this.counters.aborted++;
        const wasRunning = job.state !== 'waiting' && job.state !== 'new';
        this._done(job, 'done', wasRunning);
        if (!job.res.destroyed)
            job.res.destroy();
    }

    _done(job, state, wasRunning = true) {
        job.state = state;
        this.jobs.delete(job);
        if (job.acquired) {
            this.cache.release(job.hashes);
            job.acquired = false;
        }
        if (wasRunning) {
            this.running--;
            const next = this.waiting.shift();
            if (next)
                this._admit(next);
        }
    }
}

/*
 * Start a replica; resolves to {name, url, port, stats(), requests(),
 * metricsText(), reset(), close(), mock}. opts: see DEFAULTS (name,
 * capacityTokens, blockTokens, usPerToken, usPerOutputToken, speed,
 * maxRunning, chunkTokens, model), plus host and port.
 */
async function startVllmMock(opts = {}) {
    const mock = new VllmMock(opts);
    await mock.listen(opts.port || 0, opts.host || '127.0.0.1');
    return {
        name: mock.name, url: mock.url, port: mock.port, mock,
        stats: () => mock.stats(),
        requests: () => mock.requests(),
        metricsText: () => mock.metricsText(),
        reset: () => mock.reset(),
        close: () => mock.close(),
    };
}

/* ------------------------------------------------------------------------ */
/* CLI                                                                       */

const CLI_OPTIONS = {
    '--name': ['name', String], '--host': ['host', String], '--port': ['port', Number],
    '--model': ['model', String], '--capacity-tokens': ['capacityTokens', Number],
    '--block-tokens': ['blockTokens', Number], '--us-per-token': ['usPerToken', Number],
    '--us-per-output-token': ['usPerOutputToken', Number], '--speed': ['speed', Number],
    '--max-running': ['maxRunning', Number], '--chunk-tokens': ['chunkTokens', Number],
};

function parseArgs(argv) {
    const opts = {};
    for (let i = 0; i < argv.length; i++) {
        const spec = CLI_OPTIONS[argv[i]];
        if (!spec || i + 1 >= argv.length)
            throw new Error(`bad option ${argv[i]} (options: ${Object.keys(CLI_OPTIONS).join(' ')})`);
        const v = spec[1](argv[++i]);
        if (spec[1] === Number && !(Number.isFinite(v) && v >= 0))
            throw new Error(`${argv[i - 1]} needs a number >= 0`);
        opts[spec[0]] = v;
    }
    if (opts.speed === 0 || opts.blockTokens === 0)
        throw new Error('--speed and --block-tokens must be > 0');
    return opts;
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    const m = await startVllmMock(opts);
    process.stdout.write(`listening ${m.mock.host}:${m.port} ${m.name}\n`);
    const stop = () => m.close().then(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}

if (require.main === module)
    main().catch((e) => {
        process.stderr.write(`mock vllm: ${e.message}\n`);
        process.exit(2);
    });

module.exports = {startVllmMock, VllmMock, DEFAULTS};
