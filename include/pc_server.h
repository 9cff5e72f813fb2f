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

#endif
