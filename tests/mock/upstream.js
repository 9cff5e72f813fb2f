'use strict';
/*
 * upstream.js - a mock LLM upstream that speaks the real wire formats of the
 * OpenAI API (chat completions, legacy completions, embeddings, models, the
 * Responses API) and the Anthropic Messages API, both as whole JSON answers
 * and as SSE streams.
 * This file is the server (controls, bookkeeping, CLI); the answers
 * themselves are built in formats.js.
 *
 * Used in-process by the tests (createMock) and as a CLI by `make demo`:
 *   node tests/mock/upstream.js [--host 127.0.0.1] [--port 0]
 * prints "listening HOST:PORT" on stdout once it accepts connections.
 *
 * Every answer names the mock's call sequence number and the start of the
 * last user message ("mock answer #7 to: ..."), so each upstream call gives a
 * distinct answer: a cache HIT is proven by getting an earlier call's text
 * back, and the test can still recognise which question it answers.
 *
 * Behaviour is steered per request by headers the proxy forwards untouched:
 *   x-mock-status: N          answer N with an error body in the endpoint's shape
 *   x-mock-delay-ms: N        wait before sending the response head
 *   x-mock-chunk-delay-ms: N  wait between stream events
 *   x-mock-chunks: N          number of content pieces (default 4)
 *   x-mock-cut: 1             destroy the socket half-way through the body/stream
 *   x-mock-size: N            answer text of N bytes, sent in 64 KiB pieces
 *   x-mock-hold: ID           send the head and the first part, then wait for
 *                             mock.release(ID) or POST /__mock/release?id=ID
 *   x-mock-hold-head: ID      wait for mock.release(ID) before anything is sent,
 *                             the head included (mock.waitForHold(ID) as above)
 *   x-mock-gzip: 1            a JSON answer gzip-compressed (Content-Encoding: gzip),
 *                             whatever the request's Accept-Encoding said
 *   x-mock-body: TEXT         answer exactly TEXT as application/json, with
 *                             x-mock-status (default 200): a gateway's odd 2xx
 *   x-mock-header: NAME: V    one more response header on the answer
 *   x-mock-header-size: N     one more response header, x-mock-big, of N bytes
 *                             (an answer head larger than any client may send)
 *   x-mock-sse: BASE64        answer exactly these bytes as a 200 text/event-stream
 *                             (odd framing: CR line ends, a BOM, unknown events),
 *                             one byte per write with x-mock-sse-bytes: 1
 *   x-mock-prompt-tokens: N   usage: N prompt tokens read in full (else a word count)
 *   x-mock-completion-tokens: N  usage: N completion tokens (else a word count)
 *   x-mock-cache-read: N      usage: N more prompt tokens, read from the provider's
 *                             prompt cache (OpenAI prompt_tokens_details.cached_tokens,
 *                             Responses input_tokens_details.cached_tokens, Anthropic
 *                             cache_read_input_tokens)
 *   x-mock-cache-write: N     usage: N more prompt tokens written to it (Anthropic
 *                             cache_creation_input_tokens; ignored for OpenAI)
 *   x-mock-cache-write-1h: N  of those, N kept for an hour (Anthropic
 *                             cache_creation.ephemeral_1h_input_tokens; the rest
 *                             are ephemeral_5m_input_tokens)
 *   x-mock-audio-prompt-tokens: N      usage: of the prompt tokens, N audio (OpenAI
 *   x-mock-audio-completion-tokens: N  prompt_tokens_details / completion_tokens_details
 *                                      audio_tokens)
 *   x-mock-meaning: ID        answer by meaning (below): "mock answer by meaning ID"
 *   x-mock-echo: 1            the answer quotes the whole question and names the
 *                             credential it came with: "mock answer #7 to: QUESTION
 *                             [auth H]", H a short hash of Authorization (else
 *                             x-api-key); " tag T" added with x-mock-tag: T
 *                             (bench/soak: whose answer a cached one is)
 *   x-mock-stamp: 1           a stream's events each open with an SSE comment
 *                             ": t=NS", the machine's monotonic clock in ns when
 *                             the event was written (bench/lib/ttfb.js: the
 *                             delivery time of every chunk)
 *
 * By meaning (the error bound's tests and bench/semantic-bound): with
 * mock.meaningOf set to a function (question, body) -> id (or null), or a
 * request's x-mock-meaning header, the answer is "mock answer by meaning ID":
 * the same for every question of one meaning, whatever the call, so a model
 * that answers by meaning is played: two texts of a positive pair get one
 * answer, others different ones. Questions without an id get the usual
 * numbered answer. rec.meaning records the id used.
 *
 * Responses API state, as the provider keeps it: a response created with
 * "store" not false is remembered for the credential that created it, and a
 * request naming a previous_response_id that is not remembered for its
 * credential (never stored, another tenant's, or forgotten with
 * mock.forgetResponse(id), as when the provider's retention ends) gets the
 * API's 404.
 *
 * The bookkeeping members the APIs check (service_tier, metadata, user,
 * store; formats.js bookkeepingRefusal): a value the real API refuses is
 * answered with its 400, in the endpoint's error shape.
 *
 * A broken replica: with mock.failWith set to a status (503), every call
 * without an x-mock-status of its own is answered with that error.
 *
 * Answers carry the headers the real APIs send: request ids
 * (x-request-id, request-id), openai-processing-ms / -model / -version,
 * the organisation, rate-limit headers and a Set-Cookie.
 *
 * Observability (in-process, or GET /__mock/stats; POST /__mock/reset):
 * call counts in total and per path, the received requests, the number of
 * responses the client (the proxy) abandoned, and write backpressure.
 *
 *   request ──▶ record ──▶ build answer (JSON body or SSE events) ──▶ parts
 *                                                                      │
 *        delay ─▶ head ─▶ part 0 ─▶ [hold] ─▶ part 1 ─▶ ... [cut] ─▶ end
 *                       (each write waits for 'drain' when the socket is full)
 */
const http = require('node:http');
const crypto = require('node:crypto');
const zlib = require('node:zlib');
const {EventEmitter} = require('node:events');
const {
    ENDPOINTS, BIG_PIECE, errorAnswer, openaiError, modelList, bookkeepingRefusal,
    lastUserText, promptText, countTokens, answerText, echoText, meaningText, embeddingVector,
} = require('./formats');

const DEFAULT_CHUNKS = 4;
const MAX_REQUEST_BODY = 64 * 1024 * 1024;

/* The controls a request carries, parsed from its x-mock-* headers. */
function readControls(headers) {
    const int = (name) => {
        const v = headers[name];
        return v === undefined ? undefined : parseInt(v, 10);
    };
    return {
        status: int('x-mock-status'),
        delayMs: int('x-mock-delay-ms') || 0,
        chunkDelayMs: int('x-mock-chunk-delay-ms') || 0,
        chunks: Math.max(1, int('x-mock-chunks') || DEFAULT_CHUNKS),
        cut: headers['x-mock-cut'] === '1',
        gzip: headers['x-mock-gzip'] === '1',
        body: headers['x-mock-body'],
        sse: headers['x-mock-sse'],
        sseBytes: headers['x-mock-sse-bytes'] === '1',
        size: int('x-mock-size') || 0,
        hold: headers['x-mock-hold'],
        holdHead: headers['x-mock-hold-head'],
        header: headers['x-mock-header'],
        headerSize: int('x-mock-header-size') || 0,
        promptTokens: int('x-mock-prompt-tokens'),
        completionTokens: int('x-mock-completion-tokens'),
        cacheRead: int('x-mock-cache-read') || 0,
        cacheWrite: int('x-mock-cache-write') || 0,
        cacheWrite1h: int('x-mock-cache-write-1h') || 0,
        audioPrompt: int('x-mock-audio-prompt-tokens') || 0,
        audioCompletion: int('x-mock-audio-completion-tokens') || 0,
        stamp: headers['x-mock-stamp'] === '1',
        echo: headers['x-mock-echo'] === '1',
        tag: headers['x-mock-tag'],
    };
}

/* ------------------------------------------------------------------------ */
/* Writing responses                                                         */

/* Thrown inside a response writer when the client went away. */
class ClientGone extends Error {}

/*
 * A text made from the request (the model's name) as a header value: Node
 * throws on a CR, LF or other control character there, and a name is any
 * JSON string. Printable ASCII is kept; anything else is percent-encoded.
 */
function headerSafe(text) {
    return /^[\x20-\x7e]*$/.test(text) ? text : encodeURIComponent(text);
}

/* Split a whole body into slices so that hold/cut have a middle to act on. */
function sliceBody(body, parts) {
    const buf = Buffer.from(body);
    const n = Math.max(parts, Math.ceil(buf.length / BIG_PIECE));
    const per = Math.max(1, Math.ceil(buf.length / n));
    const slices = [];
    for (let i = 0; i < buf.length; i += per)
        slices.push(buf.subarray(i, i + per));
    return slices.length ? slices : [buf];
}

/* Mocks started by one test process, numbered: the response ids of two replicas never meet. */
let mockInstances = 0;

class Mock extends EventEmitter {
    constructor() {
        super();
        this.instance = ++mockInstances;
        this.setMaxListeners(0);
        this.server = http.createServer((req, res) => this._onRequest(req, res));
        this.server.keepAliveTimeout = 30000;
        this.port = 0;
        this.url = null;
        this._holding = new Map(); /* id -> resolve functions of held responses */
        this._released = new Set(); /* ids released (possibly before their request came) */
        this._stored = new Map(); /* Responses API: stored response id -> credential */
        this.meaningOf = null; /* by-meaning mode: (question, body) -> id or null */
        this.failWith = null; /* a status every call is answered with (a broken replica), or null */
        this.reset();
    }

    /* Start listening; resolves to the mock itself with port and url set. */
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

    /* Release every held response, drop connections and stop listening. */
    close() {
        for (const id of [...this._holding.keys()])
            this.release(id);
        this.server.closeAllConnections();
        return new Promise((resolve) => this.server.close(() => resolve()));
    }

    /* Forget counters and recorded requests (held responses stay held). */
    reset() {
        this.seq = 0;
        this.calls = {total: 0, byPath: {}};
        this.requests = [];
        this.aborted = 0;
        this.backpressure = {waits: 0, bytesWritten: 0};
        this._released.clear();
    }

    /* Responses API: whether a stored response id resolves, and forgetting one (retention over). */
    knowsResponse(id) {
        return this._stored.has(id);
    }

    forgetResponse(id) {
        return this._stored.delete(id);
    }

    /* Number of calls received, on one path or in total. */
    callCount(path) {
        return path === undefined ? this.calls.total : this.calls.byPath[path] || 0;
    }

    lastRequest(path) {
        const list = path === undefined ? this.requests : this.requests.filter((r) => r.path === path);
        return list[list.length - 1];
    }

    /* Let held response(s) with this id continue; ids released early are remembered. */
    release(id) {
        this._released.add(id);
        const waiters = this._holding.get(id) || [];
        this._holding.delete(id);
        waiters.forEach((resolve) => resolve());
        return waiters.length;
    }

    isHolding(id) {
        return this._holding.has(id);
    }

    /* Resolves once a response with this hold id has reached its hold point. */
    waitForHold(id, timeoutMs = 10000) {
        return this._waitFor(() => this.isHolding(id), 'hold', `hold ${id}`, timeoutMs);
    }

    /* Resolves once at least n calls have been received (in total or on path). */
    waitForCalls(n, path, timeoutMs = 10000) {
        return this._waitFor(() => this.callCount(path) >= n, 'request',
            `${n} calls${path ? ' to ' + path : ''}`, timeoutMs);
    }

    /* Resolves once at least n responses were abandoned by the client. */
    waitForAborted(n, timeoutMs = 10000) {
        return this._waitFor(() => this.aborted >= n, 'aborted', `${n} aborted responses`, timeoutMs);
    }

    stats() {
        return {
            calls: this.calls,
            aborted: this.aborted,
            backpressure: this.backpressure,
            holding: [...this._holding.keys()],
            requests: this.requests,
        };
    }

    _waitFor(cond, event, what, timeoutMs) {
        if (cond())
            return Promise.resolve();
        return new Promise((resolve, reject) => {
            const check = () => {
                if (!cond())
                    return;
                cleanup();
                resolve();
            };
            const timer = setTimeout(() => {
                cleanup();
                reject(new Error(`mock: timed out after ${timeoutMs} ms waiting for ${what}`));
            }, timeoutMs);
            const cleanup = () => {
                clearTimeout(timer);
                this.off(event, check);
            };
            this.on(event, check);
        });
    }

    async _onRequest(req, res) {
        let raw;
        try {
            raw = await readBody(req);
        } catch (e) {
            res.destroy();
            return;
        }
        const url = new URL(req.url, 'http://mock');
        if (url.pathname.startsWith('/__mock/'))
            return this._control(req, res, url);
        const rec = this._record(req, url, raw);
        const out = this._output(res, rec);
        try {
            const controls = readControls(req.headers);
            if (this.failWith && controls.status === undefined)
                controls.status = this.failWith;
            await this._respond(req, out, controls);
        } catch (e) {
            if (!(e instanceof ClientGone))
                throw e;
        }
    }

    /*
     * The response being written, with a promise that settles when its
     * connection closes: every wait races against it so that a response the
     * proxy abandoned stops at once (and is counted as aborted).
     */
    _output(res, rec) {
        const out = {res, rec, closed: false, onClose: new Set(), flushed: Promise.resolve()};
        rec.aborted = false;
        out.gone = new Promise((resolve) => res.once('close', () => {
            out.closed = true;
            out.onClose.forEach((fn) => fn());
            if (!res.writableFinished && !rec.cutByMock) {
                rec.aborted = true;
                this.aborted++;
                this.emit('aborted');
            }
            resolve();
        }));
        return out;
    }

    _record(req, url, raw) {
        let body = null;
        try {
            body = raw.length ? JSON.parse(raw) : null;
        } catch (e) {
            body = null;
        }
        const rec = {
            seq: ++this.seq, method: req.method, path: url.pathname, url: req.url,
            headers: req.headers, rawHeaders: req.rawHeaders, body, rawBody: raw,
        };
        this.calls.total++;
        this.calls.byPath[url.pathname] = (this.calls.byPath[url.pathname] || 0) + 1;
        this.requests.push(rec);
        this.emit('request', rec);
        return rec;
    }

    async _respond(req, out, controls) {
        if (controls.delayMs > 0)
            await this._pause(out, controls.delayMs);
        if (controls.holdHead !== undefined)
            await this._hold(out, controls.holdHead);
        const answer = this._answer(req, out.rec, controls);
        const extra = /^([^:]+):\s*(.*)$/.exec(controls.header || '');
        if (extra)
            answer.headers = {...answer.headers, [extra[1].toLowerCase()]: extra[2]};
        if (controls.headerSize > 0)
            answer.headers = {...answer.headers, 'x-mock-big': 'b'.repeat(controls.headerSize)};
        out.rec.status = answer.status;
        await this._send(out, answer, controls);
    }

    /* Decide what to send: an error, a JSON answer or a stream. */
    _answer(req, rec, controls) {
        const ep = ENDPOINTS[rec.path];
        if (controls.body !== undefined)
            return {status: controls.status || 200, headers: {'content-type': 'application/json'},
                parts: [controls.body]};
        if (controls.sse !== undefined) {
            const raw = Buffer.from(controls.sse, 'base64');
            const parts = [];
            for (let i = 0; controls.sseBytes && i < raw.length; i++)
                parts.push(raw.subarray(i, i + 1));
            return {status: 200, headers: {'content-type': 'text/event-stream'},
                parts: controls.sseBytes ? parts : [raw]};
        }
        if (controls.status >= 400)
            return errorAnswer(rec.path, controls.status, `mock error ${controls.status} (x-mock-status)`);
        if (rec.path === '/v1/models' && req.method === 'GET') {
            const list = modelList();
            if (controls.status > 0) /* e.g. 204 or 304: node sends no body for those */
                list.status = controls.status;
            return list;
        }
        if (!ep || req.method !== 'POST')
            return openaiError(404, `Unknown request URL: ${req.method} ${rec.path}.`);
        if (!rec.body || typeof rec.body !== 'object')
            return errorAnswer(rec.path, 400, 'mock: request body is not a JSON object');
        const refused = bookkeepingRefusal(rec.path, rec.body);
        if (refused)
            return refused;
        const call = this._call(rec, controls);
        if (rec.path === '/v1/responses') {
            const refused = this._previousResponse(rec);
            if (refused)
                return refused;
        }
        const wantsStream = rec.body.stream === true && ep.stream;
        const answer = wantsStream ? ep.stream(call) : ep.json(call);
        if (controls.status > 0)
            answer.status = controls.status;
        if (rec.path === '/v1/responses' && answer.status === 200 && rec.body.store !== false)
            this._stored.set(call.respId, rec.headers.authorization || '');
        return answer;
    }

    /* The API's 404 when previous_response_id does not resolve for this credential. */
    _previousResponse(rec) {
        const prev = rec.body.previous_response_id;
        if (typeof prev !== 'string' || this._stored.get(prev) === (rec.headers.authorization || ''))
            return null;
        const answer = openaiError(404, `Previous response with id '${prev}' not found.`);
        const err = JSON.parse(answer.parts[0]);
        err.error.param = 'previous_response_id';
        err.error.code = 'previous_response_not_found';
        answer.parts = [JSON.stringify(err)];
        return answer;
    }

    /* Everything a builder needs to know about one call. */
    _call(rec, controls) {
        const question = lastUserText(rec.body);
        rec.meaning = this._meaning(rec, question);
        const credential = rec.headers.authorization || rec.headers['x-api-key'] || '';
        const props = schemaProperties(rec.body);
        const text = rec.meaning !== null ? meaningText(rec.meaning, controls.size)
            : controls.echo ? echoText(rec.seq, question, credential, controls.tag)
                : props ? structuredText(rec.seq, props)
                    : answerText(rec.seq, question, controls.size);
        rec.answer = {length: text.length, sha256: crypto.createHash('sha256').update(text).digest('hex')};
        return {
            seq: rec.seq, body: rec.body, controls, question, text,
            model: typeof rec.body.model === 'string' ? rec.body.model : 'unknown',
            id: `chatcmpl-mock${rec.seq}`, msgId: `msg_mock${rec.seq}`, respId: `resp_mock${this.instance}_${rec.seq}`,
            created: Math.floor(Date.now() / 1000),
            promptTokens: controls.promptTokens !== undefined ? controls.promptTokens
                : countTokens(promptText(rec.body)),
            openaiHeaders: {
                'x-request-id': `req_mock${rec.seq}`, 'openai-processing-ms': String(100 + rec.seq),
                'openai-version': '2020-10-01', 'openai-model': typeof rec.body.model === 'string'
                    ? headerSafe(`${rec.body.model}-2025-01-01`) : 'unknown',
                'openai-organization': 'mock-org', 'x-ratelimit-remaining-requests': String(10000 - rec.seq),
                'set-cookie': `__cf_bm=mock${rec.seq}; path=/; HttpOnly`,
            },
            anthropicHeaders: {
                'request-id': `req_mock${rec.seq}`, 'anthropic-organization-id': 'mock-org',
                'anthropic-ratelimit-requests-remaining': String(10000 - rec.seq),
            },
        };
    }

    /* The meaning id of a question (x-mock-meaning, else mock.meaningOf), or null. */
    _meaning(rec, question) {
        const h = rec.headers['x-mock-meaning'];
        if (h !== undefined && h !== '')
            return String(h);
        const id = this.meaningOf ? this.meaningOf(question, rec.body) : null;
        return id === null || id === undefined ? null : String(id);
    }

    /* Write head and parts, applying hold, cut and chunk delays. */
    async _send(out, answer, controls) {
        const streaming = answer.headers['content-type'].startsWith('text/event-stream');
        const wantsMiddle = controls.cut || controls.hold !== undefined;
        let body = answer.parts[0];
        if (!streaming && controls.gzip) {
            body = zlib.gzipSync(Buffer.from(body));
            answer.headers['content-encoding'] = 'gzip';
        }
        const parts = streaming ? answer.parts : sliceBody(body, wantsMiddle ? 2 : 1);
        if (!streaming)
            answer.headers['content-length'] = String(parts.reduce((n, p) => n + p.length, 0));
        out.res.writeHead(answer.status, answer.headers);
        const cutAt = controls.cut ? Math.max(1, Math.floor(parts.length / 2)) : -1;
        for (let i = 0; i < parts.length; i++) {
            if (i === cutAt)
                return await this._cut(out);
            if (i === 1 && controls.hold !== undefined)
                await this._hold(out, controls.hold);
            else if (i > 0 && streaming && controls.chunkDelayMs > 0)
                await this._pause(out, controls.chunkDelayMs);
            /* process.hrtime is CLOCK_MONOTONIC: comparable with any process's here */
            const stamp = streaming && controls.stamp ? `: t=${process.hrtime.bigint()}\n` : '';
            await this._write(out, stamp ? stamp + parts[i] : parts[i]);
        }
        out.res.end();
    }

    /*
     * x-mock-cut: the upstream dies mid-answer (not counted as a client abort).
     * What was written is flushed first: destroying a socket drops unsent data,
     * and the point is a cut half-way, not before the head.
     */
    async _cut(out) {
        await Promise.race([out.flushed, out.gone]);
        out.rec.cutByMock = true;
        out.res.socket.destroy();
    }

    /* Write one part; when the socket buffer is full, count it and wait for 'drain'. */
    async _write(out, part) {
        if (out.closed)
            throw new ClientGone();
        this.backpressure.bytesWritten += Buffer.byteLength(part);
        let ok;
        out.flushed = new Promise((resolve) => (ok = out.res.write(part, () => resolve())));
        if (ok)
            return;
        this.backpressure.waits++;
        this.emit('backpressure');
        const drained = new Promise((resolve) => out.res.once('drain', resolve));
        await Promise.race([drained, out.gone]);
        if (out.closed)
            throw new ClientGone();
    }

    async _hold(out, id) {
        if (this._released.has(id))
            return;
        let resume;
        const released = new Promise((resolve) => (resume = resolve));
        this._holding.set(id, [...(this._holding.get(id) || []), resume]);
        /* Forget the holder as soon as its client leaves, before 'aborted' is announced. */
        const forget = () => this._forgetHolder(id, resume);
        out.onClose.add(forget);
        this.emit('hold', id);
        await Promise.race([released, out.gone]);
        out.onClose.delete(forget);
        if (out.closed)
            throw new ClientGone();
    }

    /* A held response whose client left no longer counts as holding. */
    _forgetHolder(id, resume) {
        const rest = (this._holding.get(id) || []).filter((r) => r !== resume);
        if (rest.length)
            this._holding.set(id, rest);
        else
            this._holding.delete(id);
    }

    /* A wait that ends early (with ClientGone) if the client leaves meanwhile. */
    async _pause(out, ms) {
        let timer;
        await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, ms))), out.gone]);
        clearTimeout(timer);
        if (out.closed)
            throw new ClientGone();
    }

    _control(req, res, url) {
        const reply = (status, obj) => {
            res.writeHead(status, {'content-type': 'application/json'});
            res.end(JSON.stringify(obj));
        };
        if (url.pathname === '/__mock/stats' && req.method === 'GET')
            return reply(200, this.stats());
        if (url.pathname === '/__mock/reset' && req.method === 'POST') {
            this.reset();
            return reply(200, {reset: true});
        }
        if (url.pathname === '/__mock/release' && req.method === 'POST') {
            const id = url.searchParams.get('id');
            return reply(200, {released: id, waiting: this.release(id)});
        }
        return reply(404, {error: {message: 'unknown mock control', type: 'invalid_request_error',
            param: null, code: null}});
    }
}

/*
 * Structured outputs: a chat request's response_format json_schema (or
 * vLLM's guided_json) with "properties" is answered with a JSON object of those members in the
 * schema's order, as OpenAI documents ("outputs will be produced in the same
 * order as the ordering of keys in the schema"): {"k": "mock answer #7 k"}.
 */
function schemaProperties(body) {
    const rf = body && body.response_format;
    const schema = rf && rf.type === 'json_schema' && rf.json_schema ? rf.json_schema.schema
        : body && body.guided_json; /* vLLM's guided decoding: its grammar keeps the order too */
    const props = schema && typeof schema === 'object' && schema.properties;
    return props && typeof props === 'object' && !Array.isArray(props) ? Object.keys(props) : null;
}

function structuredText(seq, props) {
    return JSON.stringify(Object.fromEntries(props.map((k) => [k, `mock answer #${seq} ${k}`])));
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
        req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
        req.on('error', reject);
    });
}

function createMock() {
    return new Mock();
}

/* ------------------------------------------------------------------------ */
/* CLI                                                                       */

function parseArgs(argv) {
    const opts = {host: '127.0.0.1', port: 0};
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === '--port')
            opts.port = parseInt(argv[++i], 10);
        else if (argv[i] === '--host')
            opts.host = argv[++i];
        else
            throw new Error(`unknown option ${argv[i]} (usage: upstream.js [--host H] [--port N])`);
    }
    return opts;
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    const mock = await createMock().listen(opts.port, opts.host);
    process.stdout.write(`listening ${opts.host}:${mock.port}\n`);
    const stop = () => mock.close().then(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}

if (require.main === module)
    main().catch((e) => {
        process.stderr.write(`mock upstream: ${e.message}\n`);
        process.exit(1);
    });

module.exports = {createMock, answerText, embeddingVector, countTokens};
