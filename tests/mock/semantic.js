'use strict';
/*
 * semantic.js - mock services of the semantic cache, for tests and benches:
 *
 *   an embeddings endpoint (POST /v1/embeddings, OpenAI's shape, input as a
 *   string or an array, usage.prompt_tokens): each text becomes a
 *   bag-of-words vector (lower-cased words hashed into DIMS buckets, unit
 *   length), so texts with the same words are near 1 and unrelated texts
 *   near 0, like a real embedding model on rewordings;
 *
 *   a chat completions endpoint playing the grey-zone verifier
 *   (POST /v1/chat/completions): it answers "yes" or "no" as `verdict` says
 *   (a function of the two requests it is shown, each quoted as a JSON
 *   string: 'Request A: "..."\nRequest B: "..."'), with usage; shown two
 *   answers ('Answer A: "..."\nAnswer B: "..."', the error bound's model
 *   comparator) it answers as `judge` says (by default: yes when equal).
 *
 * Controls (properties, changed by tests): delayMs (before answering), hold
 * (true: every call is held, unanswered, until release(); `held` counts them), fail
 * (answer 500), verdict(a, b) and judge(a, b) -> 'yes' | 'no' | other text,
 * vectorScale (multiplies every number of the embeddings: not unit length),
 * rewrite(text) -> text (the embeddings answer as sent: forged numbers).
 * Bookkeeping: embedCalls, embedInputs, verifyCalls, judgeCalls, lastVerifyBody.
 *
 * CLI: node tests/mock/semantic.js [--port N] prints "listening HOST:PORT".
 */
const http = require('node:http');
const crypto = require('node:crypto');

const DIMS = 64;

function bagOfWords(text, dims = DIMS) {
    const v = new Array(dims).fill(0);
    for (const w of String(text).toLowerCase().match(/[\p{L}\p{N}]+/gu) || []) {
        const h = crypto.createHash('sha256').update(w).digest();
        v[h.readUInt32LE(0) % dims] += h[4] & 1 ? 1 : -1;
    }
    const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    return n > 0 ? v.map((x) => x / n) : v.map(() => 0);
}

function cosine(a, b) {
    const x = bagOfWords(a), y = bagOfWords(b);
    return x.reduce((s, v, i) => s + v * y[i], 0);
}

class SemanticMock {
    constructor() {
        this.delayMs = 0;
        this.hold = false;
        this._held = [];
        this.dims = DIMS; /* another model behind the same URL and model name: set it */
        this.vectorScale = 1;
        this.rewrite = null;
        this.fail = false;
        this.verdict = () => 'yes';
        this.judge = (a, b) => (a.trim() === b.trim() ? 'yes' : 'no');
        this.judgeCalls = 0;
        this.embedCalls = 0;
        this.embedInputs = 0;
        this.verifyCalls = 0;
        this.lastVerifyBody = null;
        this.server = http.createServer((req, res) => this._handle(req, res));
        this.sockets = new Set();
        this.server.on('connection', (s) => {
            this.sockets.add(s);
            s.on('close', () => this.sockets.delete(s));
        });
    }

    listen(port = 0, host = '127.0.0.1') {
        return new Promise((resolve) => this.server.listen(port, host, () => {
            this.port = this.server.address().port;
            this.url = `http://${host}:${this.port}`;
            resolve(this);
        }));
    }

    close() {
        for (const s of this.sockets)
            s.destroy();
        return new Promise((resolve) => this.server.close(() => resolve()));
    }

    _handle(req, res) {
        const chunks = [];
        req.on('data', (c) => chunks.push(c));
        req.on('end', () => {
            let body = null;
            try {
                body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch (e) {
                body = null;
            }
            if (this.hold)
                this._held.push(() => this._answer(req, res, body));
            else
                setTimeout(() => this._answer(req, res, body), this.delayMs);
        });
    }

    /* Calls held (hold) and not answered yet. */
    get held() {
        return this._held.length;
    }

    /* Stop holding; the calls held are answered now. */
    release() {
        this.hold = false;
        for (const answer of this._held.splice(0))
            answer();
    }

    _send(res, status, obj) {
        if (res.destroyed)
            return;
        const text = JSON.stringify(obj);
        res.writeHead(status, {'content-type': 'application/json', 'content-length': Buffer.byteLength(text)});
        res.end(text);
    }

    _answer(req, res, body) {
        if (this.fail)
            return this._send(res, 500, {error: {message: 'mock failure', type: 'server_error'}});
        if (req.url.endsWith('/embeddings'))
            return this._embeddings(res, body);
        if (req.url.endsWith('/chat/completions'))
            return this._verify(res, body);
        return this._send(res, 404, {error: {message: 'not found', type: 'invalid_request_error'}});
    }

    _embeddings(res, body) {
        this.embedCalls++;
        const input = body && body.input;
        const texts = Array.isArray(input) ? input : [input];
        this.embedInputs += texts.length;
        const data = texts.map((t, index) => ({object: 'embedding', index,
            embedding: bagOfWords(t, this.dims).map((x) => x * this.vectorScale)}));
        const tokens = texts.reduce((n, t) => n + String(t).split(/\s+/).length, 0);
        const answer = {object: 'list', data, model: body && body.model,
            usage: {prompt_tokens: tokens, total_tokens: tokens}};
        if (this.rewrite == null)
            return this._send(res, 200, answer);
        const text = this.rewrite(JSON.stringify(answer));
        res.writeHead(200, {'content-type': 'application/json', 'content-length': Buffer.byteLength(text)});
        res.end(text);
    }

    _verify(res, body) {
        this.verifyCalls++;
        this.lastVerifyBody = body;
        const user = body && body.messages && body.messages[body.messages.length - 1];
        const text = user ? String(user.content) : '';
        /* Each text a JSON string literal: what lies outside the two quotes is the proxy's. */
        const quoted = String.raw`("(?:[^"\\\n]|\\.)*")`;
        const m = new RegExp(`^Request A: ${quoted}\\nRequest B: ${quoted}$`).exec(text);
        const j = new RegExp(`^Answer A: ${quoted}\\nAnswer B: ${quoted}$`).exec(text);
        if (j)
            this.judgeCalls++;
        const answer = m ? this.verdict(JSON.parse(m[1]), JSON.parse(m[2]))
            : j ? this.judge(JSON.parse(j[1]), JSON.parse(j[2])) : 'unclear';
        this._send(res, 200, {
            id: 'chatcmpl-verify', object: 'chat.completion', model: body && body.model,
            choices: [{index: 0, message: {role: 'assistant', content: answer}, finish_reason: 'length'}],
            usage: {prompt_tokens: 40, completion_tokens: 1, total_tokens: 41},
        });
    }
}

function createSemanticMock() {
    return new SemanticMock();
}

module.exports = {createSemanticMock, bagOfWords, cosine, DIMS};

if (require.main === module) {
    const i = process.argv.indexOf('--port');
    const port = i > 0 ? Number(process.argv[i + 1]) : 0;
    createSemanticMock().listen(port).then((m) => console.log(`listening 127.0.0.1:${m.port}`));
}
