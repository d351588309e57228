! 2D explicit heat solver in Fortran 2008, instrumented with PDI: the Fortran twin of heat.c.
!
! Usage: mpirun -np P heat_f90 simulation.yml pdi.yml
!
! It reads the same simulation YAML, exposes the same data under the same names at the same
! events (`init', `iter') and computes the same field bit for bit as heat.c and heat.py
! (simulation/README.md; build with -ffp-contract=off, without -ffast-math), so that the PDI
! configurations of configs/ (heat_hdf5.yml, heat_deisa.yml) serve it unchanged.
!
! Memory layout: the YAML describes `temp' and `dtemp' in C order, size [rows + 2, cols + 2].
! Fortran is column-major, so this code stores the block as temp(0:cols+1, 0:rows+1): the
! column index first. The bytes PDI sees are then exactly heat.c's, and nothing in the YAML or
! the plugin changes. Metadata arrays (global_size, ...) keep C's meaning: (1) is the row
! dimension, (2) the column one.
!
! With the environment variable HEAT_TIMINGS=PREFIX set, each rank writes PREFIX.<rank>.json at
! the end, in heat.c's format (what deisa.launcher.report.read_timings and the benchmarks read).
program heat
  use, intrinsic :: iso_c_binding, only: c_char, c_int, c_long, c_null_char
  use, intrinsic :: iso_fortran_env, only: dp => real64, error_unit
  use mpi_f08
  use paraconf
  use pdi
  implicit none

  integer, parameter :: ROWS = 1, COLS = 2

  !> struct timespec of clock_gettime (time_t and long: C's long on the LP64 systems MPI runs on)
  type, bind(C) :: timespec
    integer(c_long) :: tv_sec, tv_nsec
  end type timespec

  interface
    integer(c_int) function clock_gettime(clock, time) bind(C, name='clock_gettime')
      import :: c_int, timespec
      integer(c_int), value :: clock
      type(timespec), intent(out) :: time
    end function clock_gettime
    integer(c_int) function c_rename(old, new) bind(C, name='rename')
      import :: c_char, c_int
      character(kind=c_char), intent(in) :: old(*), new(*)
    end function c_rename
  end interface

  ! simulation parameters (the simulation YAML), exposed at `init'
  integer, target :: global_size(2), process_grid(2), steps, output_period
  ! this rank's block, exposed at `init'
  integer, target :: local_size(2), local_start(2), rank
  ! exposed at every `iter'
  integer, target :: step, stop_flag
  real(dp), pointer, contiguous :: temp(:, :), next(:, :), dtemp(:, :), swap(:, :)

  type(MPI_Comm) :: cart
  type(PC_tree_t) :: pdi_conf
  integer :: coords(2), nranks, it, h, w, outputs, timings_status
  character(len=4096) :: simulation_path, pdi_path, timings_prefix

  ! what this rank spent where, as heat.c's Timings: written when HEAT_TIMINGS is set (benchmarks)
  real(dp) :: wtime_start, epoch, init_start, init_s, first_output_s, compute_start, &
    output_start, finalize_start, finalize_s
  real(dp), allocatable :: compute_s(:), output_s(:)

  call MPI_Init()
  wtime_start = MPI_Wtime() ! right after MPI_Init
  epoch = now_epoch() ! the same instant in seconds since 1970, to compare with other processes
  call get_environment_variable('HEAT_TIMINGS', timings_prefix, status=timings_status)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  if (command_argument_count() /= 2) then
    write (error_unit, '(a)') 'Usage: heat_f90 <simulation.yml> <pdi.yml>'
    call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  call get_command_argument(1, simulation_path)
  call get_command_argument(2, pdi_path)
  call read_config(trim(simulation_path))
  call PC_parse_path(trim(pdi_path), pdi_conf)
  if (PC_status(pdi_conf) /= 0) call fail('cannot parse the PDI configuration ' // trim(pdi_path))
  init_start = MPI_Wtime()
  call PDI_init(pdi_conf)
  init_s = MPI_Wtime() - init_start

  call decompose()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call PDI_transaction_begin('init')
  call PDI_expose('global_size', global_size, PDI_OUT)
  call PDI_expose('process_grid', process_grid, PDI_OUT)
  call PDI_expose('steps', steps, PDI_OUT)
  call PDI_expose('local_size', local_size, PDI_OUT)
  call PDI_expose('local_start', local_start, PDI_OUT)
  call PDI_expose('rank', rank, PDI_OUT)
  call PDI_transaction_end()

  h = local_size(ROWS)
  w = local_size(COLS)
  allocate (temp(0:w + 1, 0:h + 1), next(0:w + 1, 0:h + 1), dtemp(0:w + 1, 0:h + 1))
  dtemp = 0.0_dp ! ghosts stay 0.0
  call initialize(temp)
  next = temp ! boundary ghosts of both buffers stay 0.0
  allocate (compute_s(0:max(steps, 1) - 1), output_s(0:max(steps, 1) - 1))
  compute_s = 0.0_dp
  output_s = 0.0_dp
  first_output_s = 0.0_dp

  outputs = 0
  do step = 0, steps - 1
    compute_start = MPI_Wtime()
    do it = 1, output_period
      call exchange(temp)
      call iterate(temp, next)
      swap => temp
      temp => next
      next => swap
    end do
    dtemp(1:w, 1:h) = temp(1:w, 1:h) - next(1:w, 1:h)
    output_start = MPI_Wtime()
    compute_s(step) = output_start - compute_start
    ! `stop' may be filled by a plugin (deisa's `read' section: the analytics' steering value);
    ! the same value on every rank, so all leave the loop after the same step
    stop_flag = 0
    call PDI_transaction_begin('iter')
    call PDI_expose('step', step, PDI_OUT)
    call PDI_expose('temp', temp, PDI_OUT)
    call PDI_expose('dtemp', dtemp, PDI_OUT)
    call PDI_expose('stop', stop_flag, PDI_INOUT)
    call PDI_transaction_end()
    output_s(step) = MPI_Wtime() - output_start
    if (step == 0) first_output_s = MPI_Wtime() - init_start
    outputs = step + 1
    if (stop_flag /= 0) then
      if (rank == 0) write (error_unit, '(a, i0, a, i0, a)') 'heat_f90: stopped after step ', &
        step, ' of ', steps, ": `stop' set by the analytics"
      exit
    end if
  end do

  deallocate (temp, next, dtemp)
  call MPI_Comm_free(cart)
  finalize_start = MPI_Wtime()
  call PDI_finalize()
  finalize_s = MPI_Wtime() - finalize_start
  ! set, even to an empty value, as heat.c's getenv: status 0 (1: unset, -1: too long for the buffer)
  if (timings_status == 0) call write_timings(trim(timings_prefix))
  deallocate (compute_s, output_s)
  call PC_tree_destroy(pdi_conf)
  call MPI_Finalize()

contains

  !> Seconds since 1970 (CLOCK_REALTIME, as heat.c's now_epoch)
  real(dp) function now_epoch()
    integer(c_int), parameter :: CLOCK_REALTIME = 0
    type(timespec) :: now
    if (clock_gettime(CLOCK_REALTIME, now) /= 0) call fail('clock_gettime failed')
    now_epoch = real(now%tv_sec, dp) + 1e-9_dp * real(now%tv_nsec, dp)
  end function now_epoch

  !> A number as heat.c's %.6f: six decimals, and a leading 0 that Fortran's f0.6 leaves out
  function decimal(value) result(text)
    real(dp), intent(in) :: value
    character(len=:), allocatable :: text
    character(len=64) :: buffer
    write (buffer, '(f0.6)') value
    text = trim(buffer)
    if (text(1:1) == '.') then
      text = '0' // text
    else if (text(1:2) == '-.') then
      text = '-0' // text(2:)
    end if
  end function decimal

  !> Writes `<prefix>.<rank>.json' as heat.c's write_timings does (aside, then renamed: a reader
  !> sees it whole); `finalize_s' is PDI_finalize's time, `wall_s' since MPI_Init
  subroutine write_timings(prefix)
    character(len=*), intent(in) :: prefix
    character(len=:), allocatable :: path, partial
    character(len=32) :: number
    integer :: unit, status, s
    write (number, '(i0)') rank
    path = prefix // '.' // trim(number) // '.json'
    partial = path // '.partial'
    open (newunit=unit, file=partial, status='replace', action='write', form='formatted', &
      access='stream', iostat=status)
    if (status /= 0) call fail('cannot write the timings to ' // partial)
    write (unit, '(a)', advance='no') '{"rank": ' // trim(number) // ', "epoch": ' // &
      decimal(epoch) // ', "pdi_init_s": ' // decimal(init_s) // ', "first_output_s": ' // &
      decimal(first_output_s) // ', "finalize_s": ' // decimal(finalize_s) // ', "wall_s": ' // &
      decimal(MPI_Wtime() - wtime_start) // ', "steps": ['
    do s = 0, outputs - 1
      write (number, '(i0)') s
      if (s > 0) write (unit, '(a)', advance='no') ', '
      write (unit, '(a)', advance='no') '{"step": ' // trim(number) // ', "compute_s": ' // &
        decimal(compute_s(s)) // ', "output_s": ' // decimal(output_s(s)) // '}'
    end do
    write (unit, '(a)') ']}'
    close (unit)
    if (c_rename(partial // c_null_char, path // c_null_char) /= 0) then
      call fail('cannot rename the timings to ' // path)
    end if
  end subroutine write_timings

  subroutine fail(message)
    character(len=*), intent(in) :: message
    write (error_unit, '(a)') 'heat_f90: ' // message
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end subroutine fail

  integer function read_int(conf, path)
    type(PC_tree_t), intent(in) :: conf
    character(len=*), intent(in) :: path
    integer :: status
    call PC_int(PC_get(conf, path), read_int, status)
    if (status /= 0) then
      call fail('missing or non-integer key in the simulation configuration: ' // path(2:))
    end if
  end function read_int

  subroutine read_config(path)
    character(len=*), intent(in) :: path
    type(PC_tree_t) :: conf
    call PC_parse_path(path, conf)
    if (PC_status(conf) /= 0) call fail('cannot parse the simulation configuration ' // path)
    global_size(ROWS) = read_int(conf, '.global_size[0]')
    global_size(COLS) = read_int(conf, '.global_size[1]')
    process_grid(ROWS) = read_int(conf, '.process_grid[0]')
    process_grid(COLS) = read_int(conf, '.process_grid[1]')
    steps = read_int(conf, '.steps')
    output_period = read_int(conf, '.output_period')
    call PC_tree_destroy(conf)
  end subroutine read_config

  !> Block size and first index of rank `coord' out of `nprocs' along a dimension of `n' cells
  subroutine split(n, nprocs, coord, size, start)
    integer, intent(in) :: n, nprocs, coord
    integer, intent(out) :: size, start
    size = n / nprocs + merge(1, 0, coord < mod(n, nprocs))
    start = coord * (n / nprocs) + min(coord, mod(n, nprocs))
  end subroutine split

  subroutine decompose()
    character(len=128) :: detail
    integer :: dim, cart_rank
    call MPI_Comm_size(MPI_COMM_WORLD, nranks)
    if (process_grid(ROWS) * process_grid(COLS) /= nranks) then
      write (detail, '(i0, a, i0, a, i0, a, i0)') process_grid(ROWS), ' x ', process_grid(COLS), &
        ' needs ', process_grid(ROWS) * process_grid(COLS), ' ranks, got ', nranks
      call fail('process_grid does not match the number of MPI ranks: ' // trim(detail))
    end if
    do dim = 1, 2
      if (process_grid(dim) < 1 .or. global_size(dim) < process_grid(dim)) then
        call fail('each rank needs at least one cell: check global_size and process_grid')
      end if
    end do
    ! MPI numbers a Cartesian grid's ranks row-major in every language: the same blocks as heat.c
    call MPI_Cart_create(MPI_COMM_WORLD, 2, process_grid, [.false., .false.], .false., cart)
    call MPI_Comm_rank(cart, cart_rank)
    call MPI_Cart_coords(cart, cart_rank, 2, coords)
    do dim = 1, 2
      call split(global_size(dim), process_grid(dim), coords(dim), local_size(dim), &
        local_start(dim))
    end do
  end subroutine decompose

  !> 1.0 inside the centred disc of radius min(NX, NY) / 4, 0.0 elsewhere and in every ghost cell
  subroutine initialize(u)
    real(dp), intent(out) :: u(0:, 0:)
    real(dp) :: cx, cy, radius, dx, dy
    integer :: i, j
    cx = 0.5_dp * global_size(ROWS)
    cy = 0.5_dp * global_size(COLS)
    radius = minval(global_size) / 4.0_dp
    u = 0.0_dp
    do i = 1, h
      do j = 1, w
        dx = real(local_start(ROWS) + i - 1, dp) - cx
        dy = real(local_start(COLS) + j - 1, dp) - cy
        u(j, i) = merge(1.0_dp, 0.0_dp, dx * dx + dy * dy < radius * radius)
      end do
    end do
  end subroutine initialize

  !> Fills the ghost rows and columns from the 4 neighbours; ghosts on the domain boundary keep 0.0
  subroutine exchange(u)
    real(dp), intent(inout), contiguous :: u(0:, 0:)
    type(MPI_Datatype) :: column
    integer :: up, down, left, right
    ! a row, u(1:w, i), is contiguous; a column, u(j, 1:h), is strided by the leading dimension
    call MPI_Type_vector(h, 1, w + 2, MPI_DOUBLE_PRECISION, column)
    call MPI_Type_commit(column)
    call MPI_Cart_shift(cart, 0, 1, up, down)
    call MPI_Cart_shift(cart, 1, 1, left, right)
    ! last interior row goes down, first ghost row comes from up; and so on for the 3 others
    call MPI_Sendrecv(u(1, h), w, MPI_DOUBLE_PRECISION, down, 0, u(1, 0), w, &
      MPI_DOUBLE_PRECISION, up, 0, cart, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(u(1, 1), w, MPI_DOUBLE_PRECISION, up, 1, u(1, h + 1), w, &
      MPI_DOUBLE_PRECISION, down, 1, cart, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(u(w, 1), 1, column, right, 2, u(0, 1), 1, column, left, 2, cart, &
      MPI_STATUS_IGNORE)
    call MPI_Sendrecv(u(1, 1), 1, column, left, 3, u(w + 1, 1), 1, column, right, 3, cart, &
      MPI_STATUS_IGNORE)
    call MPI_Type_free(column)
  end subroutine exchange

  !> One explicit step; the operation order is part of the contract (bitwise reproducibility)
  subroutine iterate(u, new)
    real(dp), intent(in) :: u(0:, 0:)
    real(dp), intent(inout) :: new(0:, 0:)
    real(dp) :: c
    integer :: i, j
    do i = 1, h
      do j = 1, w
        c = u(j, i)
        new(j, i) = c + 0.2_dp * ((((u(j, i - 1) + u(j, i + 1)) + u(j - 1, i)) + u(j + 1, i)) &
          - 4.0_dp * c)
      end do
    end do
  end subroutine iterate

end program heat
