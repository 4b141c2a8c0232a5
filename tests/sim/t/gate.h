/* A host function that blocks its stream until the test opens the gate. */
#ifndef TESSERA_SIM_TEST_GATE_H
#define TESSERA_SIM_TEST_GATE_H

#include <pthread.h>

struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered;
    int open;
};

#define GATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0}

static inline void gate_fn(void *p)
{
    struct gate *g = p;
    pthread_mutex_lock(&g->mu);
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static inline void gate_wait_entered(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->entered)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static inline void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

#endif
