/* The sandbox ("pause") container of every Pod on the lab's real Node: PID 1 of the Pod's
 * namespaces, it only waits. No registry is reachable, so the lab builds it (devstack/pause.py).
 * As PID 1 it must reap the orphans that share its PID namespace, and end on SIGINT/SIGTERM. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(128 + sig); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &on_stop, 0);
    sigaction(SIGTERM, &on_stop, 0);
    sigaction(SIGCHLD, &on_child, 0);
    for (;;) pause();
}
