/*
 * pc_server.h - the process: binds the listening socket, starts the workers,
 * handles SIGTERM/SIGINT (stop accepting, finish in-flight requests within
 * shutdown-timeout, exit 0) and tears everything down in reverse order.
 */
#ifndef PC_SERVER_H
#define PC_SERVER_H

struct conf;

/* Run until a termination signal; returns the process exit status. */
int server_run(const struct conf *conf);

/*
 * Until server_run handles SIGHUP, and again during its teardown, a SIGHUP
 * (logrotate, systemctl reload) only leaves a note instead of terminating the
 * process (its default action): one noted before the main loop runs is then
 * taken as a reload. Once, before the configuration is read.
 */
void server_hold_sighup(void);

/*
 * Register the configuration rules of the modules that own keys
 * (pc_conf.h: embed, guard, httpd, kvsize, pricing, tenants). Once, before
 * any configuration is read; -1 on a programming error (a rule names no key).
 */
int server_add_conf_rules(void);

#endif
