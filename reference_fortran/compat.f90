! pompy Fortran oracle: not pom2k. The elementary functions of pom2k's
! loops, evaluated in the same loop nests and with the same flags, so that
! gfortran -O3 pairs the same elements for glibc's vector math library
! (libmvec) as in the original loop. pompy.compat.fortran_math() gives them
! to the torch core for bit-for-bit regression runs against Fortran.

subroutine abs_pow15(im, jm, kb, sr, pw)
  ! |sr|**1.5 for k=1..kbm1, as in dens
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: sr(im,jm,kb)
  real(8), intent(inout) :: pw(im,jm,kb)
  integer :: i, j, k

  do k = 1, kb-1
    do j = 1, jm
      do i = 1, im
        pw(i,j,k) = abs(sr(i,j,k))**1.5d0
      end do
    end do
  end do
end subroutine abs_pow15


subroutine seamount_sin(im, jm, si, sj)
  ! sin(pi*i/im) and sin(pi*j/jm), as in seamount's dx, dy loop
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(inout) :: si(im,jm), sj(im,jm)
  real(8) :: pi
  integer :: i, j

  pi = atan(1.d0)*4.d0
  do j = 1, jm
    do i = 1, im
      si(i,j) = sin(pi*dble(i)/dble(im))
      sj(i,j) = sin(pi*dble(j)/dble(jm))
    end do
  end do
end subroutine seamount_sin


subroutine seamount_exp(im, jm, ra, east_c, north_c, e)
  ! exp(-r2/ra**2) of the distance from the seamount's centre, as in
  ! seamount's depth loop
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in) :: ra, east_c(im,jm), north_c(im,jm)
  real(8), intent(inout) :: e(im,jm)
  integer :: i, j

  do j = 1, jm
    do i = 1, im
      e(i,j) = exp(-((east_c(i,j) - east_c((im+1)/2,j))**2 &
                     + (north_c(i,j) - north_c(i,(jm+1)/2))**2)/ra**2)
    end do
  end do
end subroutine seamount_exp


subroutine seamount_texp(im, jm, kb, zz, h, e)
  ! exp(zz(k)*h/1000) for k=1..kbm1, as in seamount's temperature loop
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: zz(kb), h(im,jm)
  real(8), intent(inout) :: e(im,jm,kb)
  integer :: i, j, k

  do k = 1, kb-1
    do j = 1, jm
      do i = 1, im
        e(i,j,k) = exp(zz(k)*h(i,j)/1000.d0)
      end do
    end do
  end do
end subroutine seamount_texp


subroutine cbc_log(im, jm, kb, z0b, zz, h, g)
  ! log((1+zz(kbm1))*h/z0b), as in initialize's bottom friction loop
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: z0b, zz(kb), h(im,jm)
  real(8), intent(inout) :: g(im,jm)
  integer :: i, j

  do j = 1, jm
    do i = 1, im
      g(i,j) = log((1.d0 + zz(kb-1))*h(i,j)/z0b)
    end do
  end do
end subroutine cbc_log
