/*
 * The sandbox process of the test node's pods: it holds the pod's
 * namespaces open, reaps the orphans it inherits as the pod's PID 1, and
 * exits at once on SIGINT or SIGTERM. Built static (musl-gcc) so its image
 * is this one file.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction on_stop = {0}, on_child = {0};
  on_stop.sa_handler = stop;
  sigaction(SIGINT, &on_stop, 0);
  sigaction(SIGTERM, &on_stop, 0);
  on_child.sa_handler = reap;
  on_child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &on_child, 0);
  for (;;) {
    pause();
  }
}
