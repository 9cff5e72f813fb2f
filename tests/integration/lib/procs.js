'use strict';
/*
 * procs.js - child processes the tests start (redis-server, promptcache).
 * Every process is registered so that its output can be shown when a test
 * fails and so that none outlives the test file, even when it crashes: an
 * 'exit' hook SIGKILLs whatever is still running.
 */
const {spawn} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const OUTPUT_CAP = 1024 * 1024; /* keep the last 1 MiB of each process's output */
const registry = new Set();

class Proc {
    constructor(name, cmd, args, opts = {}) {
        this.name = name;
        this.cmd = cmd;
        this.args = args;
        this.stdout = '';
        this.stderr = '';
        this.output = ''; /* stdout and stderr interleaved, as a person would see them */
        this.exitCode = null;
        this.signal = null;
        this.exitedAt = null;
        this.startedAt = Date.now();
        this.child = spawn(cmd, args, {stdio: ['ignore', 'pipe', 'pipe'], ...opts});
        this.pid = this.child.pid;
        this.child.stdout.on('data', (d) => this._append('stdout', d));
        this.child.stderr.on('data', (d) => this._append('stderr', d));
        this.exited = new Promise((resolve) => {
            this.child.on('error', (err) => {
                this._append('stderr', `spawn ${cmd}: ${err.message}\n`);
                this._markExit(null, 'SPAWN_ERROR');
                resolve(this);
            });
            this.child.on('close', (code, signal) => {
                this._markExit(code, signal);
                resolve(this);
            });
        });
        registry.add(this);
    }

    get alive() {
        return this.exitedAt === null;
    }

    /* Send a signal if the process still runs. */
    signalIt(sig) {
        if (this.alive)
            this.child.kill(sig);
    }

    /* Resolves true once exited, false if still running after ms. */
    async waitExit(ms) {
        let timer;
        const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve(false), ms)));
        const done = await Promise.race([this.exited.then(() => true), timeout]);
        clearTimeout(timer);
        return done;
    }

    /* SIGTERM, then SIGKILL if it lingers; resolves to the exit code (or signal name). */
    async terminate(graceMs = 10000) {
        this.signalIt('SIGTERM');
        if (!(await this.waitExit(graceMs))) {
            this.signalIt('SIGKILL');
            await this.exited;
        }
        return this.exitStatus();
    }

    async kill() {
        this.signalIt('SIGKILL');
        await this.exited;
    }

    exitStatus() {
        return this.exitCode !== null ? this.exitCode : this.signal;
    }

    /* The last n lines of output. */
    tail(n = 60) {
        return this.output.split('\n').slice(-n - 1).join('\n');
    }

    _append(stream, data) {
        const text = data.toString();
        this[stream] = capped(this[stream] + text);
        this.output = capped(this.output + text);
        if (this.onOutput)
            this.onOutput(text);
    }

    _markExit(code, signal) {
        this.exitCode = code;
        this.signal = signal;
        this.exitedAt = Date.now();
    }
}

function capped(s) {
    return s.length > OUTPUT_CAP ? s.slice(s.length - OUTPUT_CAP) : s;
}

function spawnTracked(name, cmd, args, opts) {
    return new Proc(name, cmd, args, opts);
}

/* Output of the processes that ran at some point since `since` (ms epoch). */
function describeProcs(since = 0, lines = 60) {
    const parts = [];
    for (const p of registry) {
        if (!p.alive && p.exitedAt < since)
            continue;
        const state = p.alive ? `running, pid ${p.pid}` : `exited with ${p.exitStatus()}`;
        parts.push(`----- ${p.name} (${state}): last ${lines} lines -----\n${p.tail(lines)}`);
    }
    return parts.join('\n');
}

/* A fresh directory under the system temp dir, removed when the process exits. */
function tmpDir(prefix) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    tmpDirs.push(dir);
    return dir;
}
const tmpDirs = [];

process.on('exit', () => {
    for (const p of registry)
        if (p.alive)
            try {
                p.child.kill('SIGKILL');
            } catch (e) {
                /* already gone */
            }
    if (!process.env.PC_KEEP_TMP)
        for (const dir of tmpDirs)
            fs.rmSync(dir, {recursive: true, force: true});
});

module.exports = {spawnTracked, describeProcs, tmpDir};
