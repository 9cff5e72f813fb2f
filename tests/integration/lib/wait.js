'use strict';
/*
 * wait.js - waiting on conditions with deadlines instead of fixed sleeps.
 * A fixed sleep is only right where the passage of time is the behaviour
 * under test (an entry aging past max-age); the tests say so where they use it.
 */

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/*
 * Poll fn until it returns a truthy value (which is returned). A throw counts
 * as "not yet"; on timeout the error names what was awaited (what: a string,
 * or a function giving one, e.g. with the last value seen) and carries the
 * last failure as its cause.
 */
async function waitFor(fn, {timeout = 10000, interval = 50, what = 'condition'} = {}) {
    const deadline = Date.now() + timeout;
    let last = null;
    for (;;) {
        try {
            const v = await fn();
            if (v)
                return v;
            last = null;
        } catch (e) {
            last = e;
        }
        if (Date.now() >= deadline) {
            const why = last ? `: ${last.message}` : '';
            const name = typeof what === 'function' ? what() : what;
            throw new Error(`timed out after ${timeout} ms waiting for ${name}${why}`, {cause: last});
        }
        await sleep(interval);
    }
}

/* Retry an assertion until it passes; on timeout rethrow its last failure. */
async function eventually(assertFn, {timeout = 10000, interval = 50} = {}) {
    const deadline = Date.now() + timeout;
    for (;;) {
        try {
            return await assertFn();
        } catch (e) {
            if (Date.now() >= deadline)
                throw e;
        }
        await sleep(interval);
    }
}

/* Reject with a clear message if promise does not settle within ms. */
async function withDeadline(promise, ms, what) {
    let timer;
    const timeout = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    });
    try {
        return await Promise.race([promise, timeout]);
    } finally {
        clearTimeout(timer);
    }
}

module.exports = {sleep, waitFor, eventually, withDeadline};
