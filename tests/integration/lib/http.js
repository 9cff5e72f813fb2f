'use strict';
/*
 * http.js - HTTP requests for the tests, on node's http module (not fetch) so
 * the tests control connections, headers and reading pace. Every request
 * uses its own connection (agent: false): what one test does to a connection
 * never leaks into the next request.
 */
const http = require('node:http');
const {StringDecoder} = require('node:string_decoder');
const {SSEParser} = require('./sse');
const {withDeadline} = require('./wait');

const DEFAULT_TIMEOUT = 30000;

/* Body and headers to send: objects become JSON unless a content-type is given. */
function encodeBody(body, headers) {
    const h = {};
    for (const [k, v] of Object.entries(headers || {}))
        if (v !== undefined)
            h[k.toLowerCase()] = v;
    if (body === undefined || body === null)
        return {payload: null, headers: h};
    const payload = Buffer.isBuffer(body) || typeof body === 'string' ? Buffer.from(body)
        : Buffer.from(JSON.stringify(body));
    if (!('content-type' in h))
        h['content-type'] = 'application/json';
    h['content-length'] = String(payload.length);
    return {payload, headers: h};
}

/*
 * Start a request: {req, response} where response resolves with the response
 * head (IncomingMessage). The caller may destroy req at any time (hang up).
 */
function beginRequest(baseUrl, {method = 'GET', path = '/', headers, body, timeout = DEFAULT_TIMEOUT}) {
    const url = new URL(path, baseUrl);
    const enc = encodeBody(body, headers);
    const req = http.request(url, {method, headers: enc.headers, agent: false});
    req.setTimeout(timeout, () => req.destroy(new Error(`${method} ${path}: no answer within ${timeout} ms`)));
    const response = new Promise((resolve, reject) => {
        req.once('error', reject);
        req.once('response', resolve);
    });
    req.end(enc.payload || undefined);
    return {req, response};
}

async function send(baseUrl, opts) {
    const {req, response} = beginRequest(baseUrl, opts);
    return {req, res: await response};
}

/* A whole response: {status, headers, body (Buffer), text, json, cache}. */
class Response {
    constructor(res, body) {
        this.status = res.statusCode;
        this.headers = res.headers;
        this.body = body;
        this.text = body.toString('utf8');
        this.cache = res.headers['x-cache-status'];
    }

    /* The body parsed as JSON, or null if it is not JSON. */
    get json() {
        if (this._json === undefined) {
            try {
                this._json = JSON.parse(this.text);
            } catch (e) {
                this._json = null;
            }
        }
        return this._json;
    }
}

/* Send a request and read the whole answer. Rejects if the answer is cut off. */
async function request(baseUrl, opts) {
    const {req, res} = await send(baseUrl, opts);
    const chunks = [];
    const timeout = opts.timeout || DEFAULT_TIMEOUT;
    await withDeadline(new Promise((resolve, reject) => {
        res.on('data', (c) => chunks.push(c));
        res.once('end', resolve);
        res.once('error', reject);
        res.once('aborted', () => reject(new Error(`${opts.method || 'GET'} ${opts.path}: response cut off`)));
    }), timeout, `body of ${opts.method || 'GET'} ${opts.path}`).catch((e) => {
        req.destroy();
        throw e;
    });
    return new Response(res, Buffer.concat(chunks));
}

/*
 * A response read incrementally, for streams: nextEvent() waits for the next
 * SSE event, rest() for the end. pause()/resume() stop and restart reading
 * (the client side of backpressure); destroy() hangs up.
 */
class StreamReader {
    constructor(req, res) {
        this.req = req;
        this.res = res;
        this.status = res.statusCode;
        this.headers = res.headers;
        this.cache = res.headers['x-cache-status'];
        this.chunks = [];
        this.bytes = 0;
        this.events = []; /* every event so far */
        this.ended = false; /* the body ended normally */
        this.failed = null; /* the connection broke before the end */
        this._queue = []; /* events not yet taken by nextEvent() */
        this._waiters = [];
        this._parser = new SSEParser();
        this._decoder = new StringDecoder('utf8'); /* a code point may straddle two reads */
        res.on('data', (c) => this._onData(c));
        res.once('end', () => this._settle(() => (this.ended = true)));
        res.once('aborted', () => this._settle(() => (this.failed = new Error('response cut off'))));
        res.once('error', (e) => this._settle(() => (this.failed = this.failed || e)));
        res.once('close', () => this._settle(() => {
            if (!this.ended)
                this.failed = this.failed || new Error('connection closed before the end');
        }));
    }

    get text() {
        return Buffer.concat(this.chunks).toString('utf8');
    }

    /* The next SSE event, waiting up to timeoutMs; rejects if the stream ends first. */
    nextEvent(timeoutMs = 10000) {
        if (this._queue.length)
            return Promise.resolve(this._queue.shift());
        if (this.ended || this.failed)
            return Promise.reject(new Error('stream ended before another event'));
        return withDeadline(new Promise((resolve, reject) => this._waiters.push({resolve, reject})),
            timeoutMs, 'next SSE event');
    }

    /* Read to the end; resolves with {events (all of them), text, complete, error}. */
    async rest(timeoutMs = 60000) {
        this.resume();
        if (!this.ended && !this.failed)
            await withDeadline(new Promise((resolve) => this._onSettled(resolve)), timeoutMs,
                'end of stream');
        return {events: this.events, text: this.text, complete: this.ended, error: this.failed};
    }

    pause() { this.res.pause(); }
    resume() { this.res.resume(); }

    destroy() {
        this.req.destroy();
        this.res.destroy();
    }

    _onData(c) {
        this.chunks.push(c);
        this.bytes += c.length;
        for (const ev of this._parser.feed(this._decoder.write(c))) {
            this.events.push(ev);
            const w = this._waiters.shift();
            if (w)
                w.resolve(ev);
            else
                this._queue.push(ev);
        }
    }

    _settle(mark) {
        mark();
        for (const w of this._waiters.splice(0))
            w.reject(new Error('stream ended before another event'));
        for (const cb of (this._settledCbs || []).splice(0))
            cb();
    }

    _onSettled(cb) {
        (this._settledCbs = this._settledCbs || []).push(cb);
    }
}

/* Send a request and return a StreamReader once the response head arrived. */
async function openStream(baseUrl, opts) {
    const {req, res} = await send(baseUrl, opts);
    return new StreamReader(req, res);
}

module.exports = {request, openStream, beginRequest, Response, StreamReader};
