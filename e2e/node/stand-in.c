/*
 * The program every container runs in the real-kubelet workload test
 * (e2e/tests/workloads.rs), in place of the upstream image's: the test
 * copies it to each path a workload's command names, so the kubelet, the
 * runtime and admission see the workload exactly as installed while no
 * upstream program (and no pull) is needed.
 *
 * As a container's first process it listens on every TCP port /ports lists
 * (the ports the workloads declare and probe; one taken by another
 * container of the pod is passed over) and answers each HTTP request 200,
 * so the kubelet's HTTP and TCP probes pass and no liveness probe restarts
 * it; until SIGTERM, reaping orphans, as a long-running controller would.
 * (HTTPS and gRPC probes fail: the test asks for Running, not Ready.) Run
 * any other way (an exec probe, a command run in the container) it exits 0
 * at once. An init container must
 * end: the test lists each init container's command line (arguments joined
 * by single spaces, line breaks as spaces) in /init-commands, and a first
 * process whose command line is listed there exits 0.
 *
 * The test node's pause image is this program too: with neither file in its
 * image it only holds the pod's namespaces and reaps the orphans it
 * inherits as PID 1, and exits at once on SIGINT or SIGTERM.
 *
 * Built static (musl-gcc), so its image needs nothing else.
 */
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE_MAX_BYTES 65536
#define PORTS_MAX 128

static char joined[LINE_MAX_BYTES];
static char line[LINE_MAX_BYTES];

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

/* argv joined by single spaces, line breaks made spaces; 0 when too long. */
static int join(int argc, char **argv) {
  size_t used = 0;
  for (int i = 0; i < argc; i++) {
    size_t n = strlen(argv[i]);
    if (used + n + 2 > sizeof joined) return 0;
    if (i > 0) joined[used++] = ' ';
    memcpy(joined + used, argv[i], n);
    used += n;
  }
  joined[used] = 0;
  for (char *c = joined; *c; c++) {
    if (*c == '\n' || *c == '\r') *c = ' ';
  }
  return 1;
}

static int listed_as_init(int argc, char **argv) {
  if (!join(argc, argv)) return 0;
  FILE *f = fopen("/init-commands", "r");
  if (!f) return 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    found = strcmp(line, joined) == 0;
  }
  fclose(f);
  return found;
}

/* Listens on each port /ports lists; returns how many. */
static int listen_all(struct pollfd *fds) {
  FILE *f = fopen("/ports", "r");
  if (!f) return 0;
  int n = 0, port;
  while (n < PORTS_MAX && fscanf(f, "%d", &port) == 1) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) continue;
    int on = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 16) < 0) {
      close(s);
      continue;
    }
    fds[n].fd = s;
    fds[n].events = POLLIN;
    n++;
  }
  fclose(f);
  return n;
}

/* One connection: read what the client sent (a probe's request is small),
 * answer 200 and close. */
static void answer(int listener) {
  int c = accept(listener, 0, 0);
  if (c < 0) return;
  struct timeval t = {1, 0};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  (void)read(c, line, sizeof line);
  static const char ok[] =
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
  (void)write(c, ok, sizeof ok - 1);
  close(c);
}

int main(int argc, char **argv) {
  if (getpid() != 1) return 0;
  if (listed_as_init(argc, argv)) return 0;
  struct sigaction on_stop = {0}, on_child = {0};
  on_stop.sa_handler = stop;
  sigaction(SIGINT, &on_stop, 0);
  sigaction(SIGTERM, &on_stop, 0);
  on_child.sa_handler = reap;
  on_child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &on_child, 0);
  static struct pollfd fds[PORTS_MAX];
  int n = listen_all(fds);
  for (;;) {
    if (n == 0) {
      pause();
      continue;
    }
    if (poll(fds, (nfds_t)n, -1) <= 0) continue;
    for (int i = 0; i < n; i++) {
      if (fds[i].revents & POLLIN) answer(fds[i].fd);
    }
  }
}
