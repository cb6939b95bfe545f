/* The pod sandbox's process: holds the pod's namespaces and reaps orphans until told to stop.
 * Written here because no registry serves registry.k8s.io/pause to this machine; built static
 * by cluster/images.py, so its image is this one file. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction quit = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &quit, NULL);
    sigaction(SIGTERM, &quit, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) pause();
    return 1;
}
