/* A PMPI interposer (LD_PRELOAD) that counts MPI calls made off the process's main thread.
 *
 * tests/test_pdi_plugin.py preloads it into the C heat solver, which initializes MPI with
 * MPI_Init (thread level MPI_THREAD_SINGLE: only the main thread may call MPI), to check that
 * the deisa plugin and its Python Bridge never call MPI from a background thread.  Each rank
 * prints one line from MPI_Finalize:
 *
 *   mpi-thread-check: rank R level L: N calls on the main thread, M off it, C collectives[ (first off: NAME)]
 */

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

static pthread_t g_main;
static unsigned long g_on_main, g_off_main, g_collectives;
static const char* g_first_off;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void record_main_thread(void)
{
	g_main = pthread_self();
}

/// counts a call of `name', a collective operation if `collective'
static void check(const char* name, int collective)
{
	pthread_mutex_lock(&g_lock);
	if (collective) ++g_collectives;
	if (pthread_equal(pthread_self(), g_main)) {
		++g_on_main;
	} else {
		if (!g_off_main) g_first_off = name;
		++g_off_main;
	}
	pthread_mutex_unlock(&g_lock);
}

int MPI_Finalize(void)
{
	check("MPI_Finalize", 0);
	int rank = -1, level = -1;
	PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
	PMPI_Query_thread(&level);
	fprintf(
		stderr,
		"mpi-thread-check: rank %d level %d: %lu calls on the main thread, %lu off it, %lu collectives%s%s%s\n",
		rank,
		level,
		g_on_main,
		g_off_main,
		g_collectives,
		g_first_off ? " (first off: " : "",
		g_first_off ? g_first_off : "",
		g_first_off ? ")" : ""
	);
	return PMPI_Finalize();
}

int MPI_Allgather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm c)
{
	check("MPI_Allgather", 1);
	return PMPI_Allgather(sb, sc, st, rb, rc, rt, c);
}

int MPI_Allgatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int rc[], const int d[], MPI_Datatype rt, MPI_Comm c)
{
	check("MPI_Allgatherv", 1);
	return PMPI_Allgatherv(sb, sc, st, rb, rc, d, rt, c);
}

int MPI_Allreduce(const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
	check("MPI_Allreduce", 1);
	return PMPI_Allreduce(sb, rb, n, t, op, c);
}

int MPI_Alltoall(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm c)
{
	check("MPI_Alltoall", 1);
	return PMPI_Alltoall(sb, sc, st, rb, rc, rt, c);
}

int MPI_Barrier(MPI_Comm c)
{
	check("MPI_Barrier", 1);
	return PMPI_Barrier(c);
}

int MPI_Bcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
	check("MPI_Bcast", 1);
	return PMPI_Bcast(b, n, t, root, c);
}

int MPI_Gather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, int root, MPI_Comm c)
{
	check("MPI_Gather", 1);
	return PMPI_Gather(sb, sc, st, rb, rc, rt, root, c);
}

int MPI_Gatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int rc[], const int d[], MPI_Datatype rt, int root, MPI_Comm c)
{
	check("MPI_Gatherv", 1);
	return PMPI_Gatherv(sb, sc, st, rb, rc, d, rt, root, c);
}

int MPI_Reduce(const void* sb, void* rb, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c)
{
	check("MPI_Reduce", 1);
	return PMPI_Reduce(sb, rb, n, t, op, root, c);
}

int MPI_Scatter(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, int root, MPI_Comm c)
{
	check("MPI_Scatter", 1);
	return PMPI_Scatter(sb, sc, st, rb, rc, rt, root, c);
}

int MPI_Send(const void* b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c)
{
	check("MPI_Send", 0);
	return PMPI_Send(b, n, t, dest, tag, c);
}

int MPI_Recv(void* b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* s)
{
	check("MPI_Recv", 0);
	return PMPI_Recv(b, n, t, src, tag, c, s);
}

int MPI_Isend(const void* b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* r)
{
	check("MPI_Isend", 0);
	return PMPI_Isend(b, n, t, dest, tag, c, r);
}

int MPI_Irecv(void* b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* r)
{
	check("MPI_Irecv", 0);
	return PMPI_Irecv(b, n, t, src, tag, c, r);
}

int MPI_Sendrecv(
	const void* sb,
	int sc,
	MPI_Datatype st,
	int dest,
	int stag,
	void* rb,
	int rc,
	MPI_Datatype rt,
	int src,
	int rtag,
	MPI_Comm c,
	MPI_Status* s
)
{
	check("MPI_Sendrecv", 0);
	return PMPI_Sendrecv(sb, sc, st, dest, stag, rb, rc, rt, src, rtag, c, s);
}

int MPI_Probe(int src, int tag, MPI_Comm c, MPI_Status* s)
{
	check("MPI_Probe", 0);
	return PMPI_Probe(src, tag, c, s);
}

int MPI_Iprobe(int src, int tag, MPI_Comm c, int* flag, MPI_Status* s)
{
	check("MPI_Iprobe", 0);
	return PMPI_Iprobe(src, tag, c, flag, s);
}

int MPI_Mprobe(int src, int tag, MPI_Comm c, MPI_Message* m, MPI_Status* s)
{
	check("MPI_Mprobe", 0);
	return PMPI_Mprobe(src, tag, c, m, s);
}

int MPI_Improbe(int src, int tag, MPI_Comm c, int* flag, MPI_Message* m, MPI_Status* s)
{
	check("MPI_Improbe", 0);
	return PMPI_Improbe(src, tag, c, flag, m, s);
}

int MPI_Mrecv(void* b, int n, MPI_Datatype t, MPI_Message* m, MPI_Status* s)
{
	check("MPI_Mrecv", 0);
	return PMPI_Mrecv(b, n, t, m, s);
}

int MPI_Wait(MPI_Request* r, MPI_Status* s)
{
	check("MPI_Wait", 0);
	return PMPI_Wait(r, s);
}

int MPI_Waitall(int n, MPI_Request r[], MPI_Status s[])
{
	check("MPI_Waitall", 0);
	return PMPI_Waitall(n, r, s);
}

int MPI_Test(MPI_Request* r, int* flag, MPI_Status* s)
{
	check("MPI_Test", 0);
	return PMPI_Test(r, flag, s);
}

int MPI_Comm_dup(MPI_Comm c, MPI_Comm* out)
{
	check("MPI_Comm_dup", 0);
	return PMPI_Comm_dup(c, out);
}

int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm* out)
{
	check("MPI_Comm_split", 0);
	return PMPI_Comm_split(c, color, key, out);
}

int MPI_Comm_free(MPI_Comm* c)
{
	check("MPI_Comm_free", 0);
	return PMPI_Comm_free(c);
}

int MPI_Comm_rank(MPI_Comm c, int* rank)
{
	check("MPI_Comm_rank", 0);
	return PMPI_Comm_rank(c, rank);
}

int MPI_Comm_size(MPI_Comm c, int* size)
{
	check("MPI_Comm_size", 0);
	return PMPI_Comm_size(c, size);
}
