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
program heat
  use, intrinsic :: iso_fortran_env, only: dp => real64, error_unit
  use mpi_f08
  use paraconf
  use pdi
  implicit none

  integer, parameter :: ROWS = 1, COLS = 2

  ! simulation parameters (the simulation YAML), exposed at `init'
  integer, target :: global_size(2), process_grid(2), steps, output_period
  ! this rank's block, exposed at `init'
  integer, target :: local_size(2), local_start(2), rank
  ! exposed at every `iter'
  integer, target :: step, stop_flag
  real(dp), pointer, contiguous :: temp(:, :), next(:, :), dtemp(:, :), swap(:, :)

  type(MPI_Comm) :: cart
  type(PC_tree_t) :: pdi_conf
  integer :: coords(2), nranks, it, h, w
  character(len=4096) :: simulation_path, pdi_path

  call MPI_Init()
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
  call PDI_init(pdi_conf)

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

  do step = 0, steps - 1
    do it = 1, output_period
      call exchange(temp)
      call iterate(temp, next)
      swap => temp
      temp => next
      next => swap
    end do
    dtemp(1:w, 1:h) = temp(1:w, 1:h) - next(1:w, 1:h)
    ! `stop' may be filled by a plugin (deisa's `read' section: the analytics' steering value);
    ! the same value on every rank, so all leave the loop after the same step
    stop_flag = 0
    call PDI_transaction_begin('iter')
    call PDI_expose('step', step, PDI_OUT)
    call PDI_expose('temp', temp, PDI_OUT)
    call PDI_expose('dtemp', dtemp, PDI_OUT)
    call PDI_expose('stop', stop_flag, PDI_INOUT)
    call PDI_transaction_end()
    if (stop_flag /= 0) then
      if (rank == 0) write (error_unit, '(a, i0, a, i0, a)') 'heat_f90: stopped after step ', &
        step, ' of ', steps, ": `stop' set by the analytics"
      exit
    end if
  end do

  deallocate (temp, next, dtemp)
  call MPI_Comm_free(cart)
  call PDI_finalize()
  call PC_tree_destroy(pdi_conf)
  call MPI_Finalize()

contains

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
