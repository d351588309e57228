! The Fortran twin of released_heat.c: the released DEISA plugin's example code, in Fortran 2008.
!
! Usage: mpirun -np P released_heat_f90 config.yml simulation.yml
!
! Same configuration files, same data under the same names at the same events (`init', then
! `Available' at every step) and the same field bit for bit as released_heat.c (build with
! -ffp-contract=off, without -ffast-math), so that released_deisa.yml and released_hdf5.yml
! serve it unchanged.  The YAML describes `local_t' in C order, [dsize[0], dsize[1]] (rows,
! columns): this code stores it as cur(0:dsize(2)-1, 0:dsize(1)-1), the column index first,
! so that PDI sees the bytes of the C code.  Metadata arrays keep C's meaning: (1) is the rows.
program released_heat
  use, intrinsic :: iso_fortran_env, only: dp => real64, error_unit
  use mpi_f08
  use paraconf
  use pdi
  implicit none

  integer, target :: dsize(2), psize(2), pcoord(2), pcoord_1d, timestep, generations
  real(dp), pointer, contiguous :: cur(:, :), next(:, :), swap(:, :)
  integer :: global_size(2), extra_steps, nranks, jj
  type(MPI_Comm) :: cart
  type(PC_tree_t) :: conf, spec
  type(PC_errhandler_t) :: handler
  character(len=4096) :: config_path, spec_path

  call MPI_Init()
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  call MPI_Comm_rank(MPI_COMM_WORLD, pcoord_1d)
  if (command_argument_count() /= 2) then
    write (error_unit, '(a)') 'usage: released_heat_f90 config.yml simulation.yml'
    call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  call get_command_argument(1, config_path)
  call get_command_argument(2, spec_path)
  call PC_errhandler(PC_NULL_HANDLER, handler) ! `extra_steps' is optional
  call PC_parse_path(trim(config_path), conf)
  global_size(1) = read_int(conf, '.global_size.height', -1)
  global_size(2) = read_int(conf, '.global_size.width', -1)
  psize(1) = read_int(conf, '.parallelism.height', -1)
  psize(2) = read_int(conf, '.parallelism.width', -1)
  generations = read_int(conf, '.MaxtimeSteps', -1)
  extra_steps = read_int(conf, '.extra_steps', 0)
  call PC_tree_destroy(conf)
  call PC_errhandler(handler)

  call PC_parse_path(trim(spec_path), spec)
  call PDI_init(PC_get(spec, '.pdi'))
  if (mod(global_size(1), psize(1)) /= 0 .or. mod(global_size(2), psize(2)) /= 0 &
      .or. psize(1) * psize(2) /= nranks) then
    write (error_unit, '(a)') 'released_heat_f90: the parallelism does not divide the global size'
    call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  dsize = global_size / psize + 2
  call MPI_Cart_create(MPI_COMM_WORLD, 2, psize, [.false., .false.], .false., cart)
  call MPI_Cart_coords(cart, pcoord_1d, 2, pcoord)

  allocate (cur(0:dsize(2) - 1, 0:dsize(1) - 1), next(0:dsize(2) - 1, 0:dsize(1) - 1))
  call init(cur)
  call init(next)
  timestep = 0
  ! share useful configuration bits with PDI
  call PDI_transaction_begin('init')
  call PDI_expose('pcoord', pcoord, PDI_OUT)
  call PDI_expose('pcoord_1d', pcoord_1d, PDI_OUT)
  call PDI_expose('dsize', dsize, PDI_OUT)
  call PDI_expose('psize', psize, PDI_OUT)
  call PDI_expose('timestep', timestep, PDI_OUT)
  call PDI_expose('MaxtimeSteps', generations, PDI_OUT)
  call PDI_transaction_end()
  do timestep = 0, generations + extra_steps - 1
    call PDI_transaction_begin('Available')
    call PDI_expose('timestep', timestep, PDI_OUT)
    call PDI_expose('local_t', cur, PDI_OUT)
    call PDI_transaction_end()
    do jj = 1, 10
      call exchange(cur)
      call iter(cur, next)
      swap => cur
      cur => next
      next => swap
    end do
  end do
  call PDI_finalize()
  call PC_tree_destroy(spec)
  deallocate (cur, next)
  call MPI_Comm_free(cart)
  call MPI_Finalize()

contains

  integer function read_int(tree, path, dflt)
    type(PC_tree_t), intent(in) :: tree
    character(len=*), intent(in) :: path
    integer, intent(in) :: dflt
    integer :: status
    call PC_int(PC_get(tree, path), read_int, status)
    if (status /= 0) then
      if (dflt < 0) then
        write (error_unit, '(a)') 'released_heat_f90: missing integer ' // path(2:)
        call MPI_Abort(MPI_COMM_WORLD, 2)
      end if
      read_int = dflt
    end if
  end function read_int

  !> Every cell its global position (row * 1000 + column), every ghost -1
  subroutine init(dat)
    real(dp), intent(out) :: dat(0:, 0:)
    integer :: yy, xx, gy, gx
    do yy = 0, dsize(1) - 1
      do xx = 0, dsize(2) - 1
        gy = pcoord(1) * (dsize(1) - 2) + yy - 1
        gx = pcoord(2) * (dsize(2) - 2) + xx - 1
        if (yy > 0 .and. yy < dsize(1) - 1 .and. xx > 0 .and. xx < dsize(2) - 1) then
          dat(xx, yy) = real(gy, dp) * 1000.0_dp + real(gx, dp)
        else
          dat(xx, yy) = -1.0_dp
        end if
      end do
    end do
  end subroutine init

  !> The next time-step from the current one: a 5-point stencil inside, the ghosts kept
  subroutine iter(c, n)
    real(dp), intent(in) :: c(0:, 0:)
    real(dp), intent(out) :: n(0:, 0:)
    integer :: yy, xx
    do yy = 0, dsize(1) - 1
      do xx = 0, dsize(2) - 1
        if (yy == 0 .or. xx == 0 .or. yy == dsize(1) - 1 .or. xx == dsize(2) - 1) then
          n(xx, yy) = c(xx, yy)
        else
          n(xx, yy) = c(xx, yy) * .5_dp + c(xx - 1, yy) * .125_dp + c(xx + 1, yy) * .125_dp &
            + c(xx, yy - 1) * .125_dp + c(xx, yy + 1) * .125_dp
        end if
      end do
    end do
  end subroutine iter

  !> Exchanges ghost values with the neighbours (MPI_PROC_NULL on the domain's boundary)
  subroutine exchange(u)
    real(dp), intent(inout), contiguous :: u(0:, 0:)
    type(MPI_Datatype) :: column
    integer :: src, dst, h, w
    h = dsize(1) - 2
    w = dsize(2) - 2
    ! a row, u(1:w, y), is contiguous; a column, u(x, 1:h), is strided by the leading dimension
    call MPI_Type_vector(h, 1, dsize(2), MPI_DOUBLE_PRECISION, column)
    call MPI_Type_commit(column)
    call MPI_Cart_shift(cart, 0, 1, src, dst)
    call MPI_Sendrecv(u(1, h), w, MPI_DOUBLE_PRECISION, dst, 100, u(1, 0), w, &
      MPI_DOUBLE_PRECISION, src, 100, cart, MPI_STATUS_IGNORE)
    call MPI_Cart_shift(cart, 0, -1, src, dst)
    call MPI_Sendrecv(u(1, 1), w, MPI_DOUBLE_PRECISION, dst, 100, u(1, h + 1), w, &
      MPI_DOUBLE_PRECISION, src, 100, cart, MPI_STATUS_IGNORE)
    call MPI_Cart_shift(cart, 1, 1, src, dst)
    call MPI_Sendrecv(u(w, 1), 1, column, dst, 100, u(0, 1), 1, column, src, 100, cart, &
      MPI_STATUS_IGNORE)
    call MPI_Cart_shift(cart, 1, -1, src, dst)
    call MPI_Sendrecv(u(1, 1), 1, column, dst, 100, u(w + 1, 1), 1, column, src, 100, cart, &
      MPI_STATUS_IGNORE)
    call MPI_Type_free(column)
  end subroutine exchange

end program released_heat
