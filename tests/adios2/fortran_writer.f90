! An MPI code written against ADIOS2's Fortran API, as a Fortran ADIOS2 user writes one: the
! Fortran test code of the deisa ADIOS2 engine (tests/test_adios2_fortran.py).
!
!   mpirun -np 4 deisa_adios2_fortran CONFIG.xml OUTPUT STEPS
!
! Writes STEPS steps to OUTPUT through io `SimulationOutput', whose engine CONFIG.xml chooses (BP5,
! or deisa): on an NX x NY global array (Fortran order: the first index runs fastest in memory),
! split over MPI_Dims_create's 2-D grid of the ranks in uneven blocks, `T' (real(8), a sync Put,
! its buffer overwritten after the Put) and `N' (integer(4), a deferred Put; on odd steps
! adios2_perform_puts, then its buffer overwritten), `G' (real(8), T's values, a deferred Put
! from a buffer with ghost cells, 1 before and 2 after the block on the first axis, 2 and 1 on the
! second, filled with -999: adios2_set_memory_selection, as a stencil code does), and two global
! single values, `step' (integer(4)) and `time' (real(8)).  ADIOS2 records the io as column-major: a row-major reader
! (C++, Python) sees the arrays NY x NX, T(i, j) at [j - 1, i - 1].  An ADIOS2 error is one line on
! rank 0's stderr and exit status 1.
program deisa_adios2_fortran
    use mpi
    use adios2
    implicit none

    integer(kind=8), parameter :: NX = 11, NY = 7
    type(adios2_adios) :: adios
    type(adios2_io) :: io
    type(adios2_engine) :: engine
    type(adios2_variable) :: var_t, var_n, var_g, var_step, var_time
    integer(kind=8) :: shape_dims(2), start_dims(2), count_dims(2)
    integer(kind=8), parameter :: BEFORE(2) = [1, 2], AFTER(2) = [2, 1] ! G's ghost cells
    real(kind=8), allocatable :: t(:, :), g(:, :)
    integer(kind=4), allocatable :: n(:, :)
    integer(kind=4) :: step
    real(kind=8) :: time
    integer :: rank, nranks, steps, ierr, grid(2), i, j
    character(len=4096) :: config, output, word

    call mpi_init(ierr)
    call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
    call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
    if (command_argument_count() /= 3) then
        if (rank == 0) write (0, '(a)') 'usage: deisa_adios2_fortran CONFIG.xml OUTPUT STEPS'
        call mpi_abort(MPI_COMM_WORLD, 2, ierr)
    end if
    call get_command_argument(1, config)
    call get_command_argument(2, output)
    call get_command_argument(3, word)
    read (word, *) steps

    grid = 0
    call mpi_dims_create(nranks, 2, grid, ierr)
    ! the first axis runs fastest over the ranks, as Fortran's first index over memory
    call uneven_split(NX, grid(1), mod(rank, grid(1)), start_dims(1), count_dims(1))
    call uneven_split(NY, grid(2), rank / grid(1), start_dims(2), count_dims(2))
    shape_dims = [NX, NY]
    allocate (t(count_dims(1), count_dims(2)), n(count_dims(1), count_dims(2)))
    allocate (g(count_dims(1) + BEFORE(1) + AFTER(1), count_dims(2) + BEFORE(2) + AFTER(2)))

    call adios2_init(adios, trim(config), MPI_COMM_WORLD, ierr)
    call check(ierr, 'adios2_init')
    call adios2_declare_io(io, adios, 'SimulationOutput', ierr)
    call check(ierr, 'adios2_declare_io')
    call adios2_define_variable(var_t, io, 'T', adios2_type_dp, 2, shape_dims, start_dims, &
                                count_dims, adios2_constant_dims, ierr)
    call check(ierr, 'adios2_define_variable T')
    call adios2_define_variable(var_n, io, 'N', adios2_type_integer4, 2, shape_dims, &
                                start_dims, count_dims, adios2_constant_dims, ierr)
    call check(ierr, 'adios2_define_variable N')
    call adios2_define_variable(var_g, io, 'G', adios2_type_dp, 2, shape_dims, start_dims, &
                                count_dims, adios2_constant_dims, ierr)
    call check(ierr, 'adios2_define_variable G')
    call adios2_set_memory_selection(var_g, 2, BEFORE, shape(g, kind=8), ierr)
    call check(ierr, 'adios2_set_memory_selection G')
    call adios2_define_variable(var_step, io, 'step', adios2_type_integer4, ierr)
    call check(ierr, 'adios2_define_variable step')
    call adios2_define_variable(var_time, io, 'time', adios2_type_dp, ierr)
    call check(ierr, 'adios2_define_variable time')
    call adios2_open(engine, io, trim(output), adios2_mode_write, ierr)
    call check(ierr, 'adios2_open')

    do step = 0, steps - 1
        do j = 1, int(count_dims(2))
            do i = 1, int(count_dims(1))
                t(i, j) = sin(0.3d0*(start_dims(1) + i - 1) + step) &
                          *cos(0.2d0*(start_dims(2) + j - 1)) + 1d-3*rank
                n(i, j) = int((start_dims(1) + i - 1)*1000 + start_dims(2) + j - 1) + step*100000
            end do
        end do
        g = -999d0 ! the ghost cells: never written
        g(BEFORE(1) + 1:BEFORE(1) + count_dims(1), BEFORE(2) + 1:BEFORE(2) + count_dims(2)) = t
        time = 0.125d0*step
        call adios2_begin_step(engine, ierr)
        call check(ierr, 'adios2_begin_step')
        call adios2_put(engine, var_step, step, adios2_mode_sync, ierr)
        call check(ierr, 'adios2_put step')
        call adios2_put(engine, var_time, time, adios2_mode_sync, ierr)
        call check(ierr, 'adios2_put time')
        call adios2_put(engine, var_t, t, adios2_mode_sync, ierr)
        call check(ierr, 'adios2_put T')
        t = -1d0 ! after a sync Put: not written
        call adios2_put(engine, var_n, n, ierr) ! deferred: read at end_step
        call check(ierr, 'adios2_put N')
        call adios2_put(engine, var_g, g, ierr)
        call check(ierr, 'adios2_put G')
        if (mod(step, 2) == 1) then
            call adios2_perform_puts(engine, ierr)
            call check(ierr, 'adios2_perform_puts')
            n = -1 ! after perform_puts: not written
        end if
        call adios2_end_step(engine, ierr)
        call check(ierr, 'adios2_end_step')
    end do
    call adios2_close(engine, ierr)
    call check(ierr, 'adios2_close')
    call adios2_finalize(adios, ierr)
    call check(ierr, 'adios2_finalize')
    call mpi_finalize(ierr)

contains

    !> An uneven split of `total' into `parts': part 0 is the largest, the others share the rest
    subroutine uneven_split(total, parts, index, start, count)
        integer(kind=8), intent(in) :: total
        integer, intent(in) :: parts, index
        integer(kind=8), intent(out) :: start, count
        integer(kind=8) :: rest, first

        rest = total/2/parts
        first = total - rest*(parts - 1)
        if (index == 0) then
            start = 0
            count = first
        else
            start = first + rest*(index - 1)
            count = rest
        end if
    end subroutine

    !> Stops every rank with one line on rank 0's stderr when an ADIOS2 call failed
    subroutine check(status, what)
        integer, intent(in) :: status
        character(len=*), intent(in) :: what
        integer :: error

        if (status == 0) return
        if (rank == 0) write (0, '(a, a, i0)') what, ' failed: ADIOS2 error ', status
        call mpi_abort(MPI_COMM_WORLD, 1, error)
    end subroutine

end program
